//! The process groups of this node's running commands, recorded before a command's gate
//! opens and forgotten when it exits: one slot each in `DATA/groups.live`.
//!
//! Why not a commit: the record must outlive the *node process* (a `kill -9` leaves the
//! group running, and the next life must stop it before the effect runs again), not the
//! machine — after a crash of the machine no process of its boot is left to stop. A
//! `pwrite` is in the kernel's page cache the moment the call returns, and a killed
//! process cannot take it back; only the machine going down can, and then there is
//! nothing left to stop. So the gate waits for a `pwrite`, not for an `fdatasync` (a
//! forced commit cost a whole commit on every command's way to its start). The store
//! keeps the record as well, unforced, riding with the next batch.
//!
//! Slots, not a file per group: creating and unlinking a file per command cost as much
//! CPU as the spawn itself (an inode each). A slot is [`SLOT_BYTES`] at a fixed offset: a
//! little-endian `u32` length, then the record as JSON; length 0 is a free slot. A record
//! too long for a slot (an effect key of kilobytes) gets a file of its own under
//! `DATA/groups/`. A slot or file that cannot be read back is dropped with a warning: a
//! record only ever names a group to stop, never work to do.

use palm_actors::path::records::RunningGroup;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use tracing::warn;

/// The slot file under a node's data directory.
const SLOTS_FILE: &str = "groups.live";
/// The directory of records too long for a slot.
const SPILL_DIR: &str = "groups";
/// One slot: a length and a record.
pub const SLOT_BYTES: usize = 1024;
/// A slot the file held when this process opened it: a previous life's record, never
/// reused before [`LiveGroups::clear`] has read past it.
const PREVIOUS: u64 = u64::MAX;

#[derive(Serialize, Deserialize)]
struct Entry {
    key: String,
    group: RunningGroup,
}

/// The slot file of one data directory, shared by every command of the node (and by a
/// restarted kernel in the same process).
#[derive(Debug)]
struct Slots {
    file: File,
    /// Per slot: the generation of the record in it, 0 when free. A handle forgets its
    /// slot only while the slot still holds its generation.
    book: Mutex<Book>,
}

#[derive(Debug, Default)]
struct Book {
    /// Per slot: a generation, 0 (free) or [`PREVIOUS`].
    slots: Vec<u64>,
    free: Vec<usize>,
    generation: u64,
}

/// A record to forget once its command has exited.
#[derive(Debug)]
pub struct LiveRecord {
    place: Place,
}

#[derive(Debug)]
enum Place {
    Slot {
        slots: Arc<Slots>,
        index: usize,
        generation: u64,
    },
    File(PathBuf),
}

impl Drop for LiveRecord {
    fn drop(&mut self) {
        match &self.place {
            Place::Slot {
                slots,
                index,
                generation,
            } => {
                let mut book = slots.book.lock().unwrap_or_else(|p| p.into_inner());
                if book.slots.get(*index) == Some(generation) {
                    if let Err(err) = slots
                        .file
                        .write_all_at(&0u32.to_le_bytes(), (*index * SLOT_BYTES) as u64)
                    {
                        warn!(%err, "cannot clear a live-group record");
                    }
                    book.slots[*index] = 0;
                    book.free.push(*index);
                }
            }
            Place::File(file) => remove(file),
        }
    }
}

fn remove(file: &Path) {
    if let Err(err) = std::fs::remove_file(file)
        && err.kind() != io::ErrorKind::NotFound
    {
        warn!(file = %file.display(), %err, "cannot remove a live-group record");
    }
}

/// The live-group records of the node whose data directory is `data`.
#[derive(Clone, Debug)]
pub struct LiveGroups {
    data: PathBuf,
}

impl LiveGroups {
    /// The records under `data`.
    pub fn new(data: &Path) -> LiveGroups {
        LiveGroups {
            data: data.to_owned(),
        }
    }

    /// The open slot file of this data directory (opened once per process).
    fn slots(&self) -> io::Result<Arc<Slots>> {
        static OPEN: OnceLock<Mutex<HashMap<PathBuf, Arc<Slots>>>> = OnceLock::new();
        let mut open = OPEN
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(slots) = open.get(&self.data) {
            return Ok(Arc::clone(slots));
        }
        std::fs::create_dir_all(&self.data)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.data.join(SLOTS_FILE))?;
        let held = (file.metadata()?.len() as usize).div_ceil(SLOT_BYTES);
        let slots = Arc::new(Slots {
            file,
            book: Mutex::new(Book {
                slots: vec![PREVIOUS; held],
                ..Book::default()
            }),
        });
        open.insert(self.data.clone(), Arc::clone(&slots));
        Ok(slots)
    }

    /// A long key's own file, named by a hash of the key (the key itself may be longer
    /// than a file name may be; the content says it).
    fn spill_file(&self, key: &str, token: u64) -> PathBuf {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        self.data
            .join(SPILL_DIR)
            .join(format!("{:016x}@{token}", hasher.finish()))
    }

    /// Records the group about to run `key`'s command; dropping the answer forgets it.
    pub fn record(&self, key: &str, group: &RunningGroup) -> io::Result<LiveRecord> {
        let entry = Entry {
            key: key.to_owned(),
            group: group.clone(),
        };
        let json = serde_json::to_vec(&entry).map_err(io::Error::other)?;
        if json.len() + 4 > SLOT_BYTES {
            let file = self.spill_file(key, group.token);
            std::fs::create_dir_all(self.data.join(SPILL_DIR))?;
            std::fs::write(&file, &json)?;
            return Ok(LiveRecord {
                place: Place::File(file),
            });
        }
        let slots = self.slots()?;
        let mut book = slots.book.lock().unwrap_or_else(|p| p.into_inner());
        let index = book.free.pop().unwrap_or_else(|| {
            book.slots.push(0);
            book.slots.len() - 1
        });
        // Whole slots, so the file is always a whole number of them.
        let mut bytes = Vec::with_capacity(SLOT_BYTES);
        bytes.extend_from_slice(&(json.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&json);
        bytes.resize(SLOT_BYTES, 0);
        if let Err(err) = slots.file.write_all_at(&bytes, (index * SLOT_BYTES) as u64) {
            book.free.push(index);
            return Err(err);
        }
        book.generation += 1;
        let generation = book.generation;
        book.slots[index] = generation;
        drop(book);
        Ok(LiveRecord {
            place: Place::Slot {
                slots,
                index,
                generation,
            },
        })
    }

    /// Every record left, by effect key (the previous life's, when read at boot).
    pub fn read_all(&self) -> Vec<(String, RunningGroup)> {
        let mut found = Vec::new();
        match std::fs::read(self.data.join(SLOTS_FILE)) {
            Ok(bytes) => {
                for (index, slot) in bytes.chunks(SLOT_BYTES).enumerate() {
                    let len = slot
                        .get(..4)
                        .map_or(0, |l| u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize);
                    if len == 0 {
                        continue;
                    }
                    match slot
                        .get(4..4 + len)
                        .and_then(|json| serde_json::from_slice::<Entry>(json).ok())
                    {
                        Some(entry) => found.push((entry.key, entry.group)),
                        // Torn by a crash of the machine mid-write: it names a process of
                        // a boot that is gone.
                        None => warn!(index, "unreadable live-group slot; ignored"),
                    }
                }
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => warn!(%err, "cannot read the live-group records"),
        }
        if let Ok(entries) = std::fs::read_dir(self.data.join(SPILL_DIR)) {
            for entry in entries.flatten() {
                let path = entry.path();
                match std::fs::read(&path)
                    .ok()
                    .and_then(|bytes| serde_json::from_slice::<Entry>(&bytes).ok())
                {
                    Some(entry) => found.push((entry.key, entry.group)),
                    None => {
                        warn!(file = %path.display(), "unreadable live-group record; removed");
                        remove(&path);
                    }
                }
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.token.cmp(&b.1.token)));
        found
    }

    /// Forgets every record (after the groups they name were stopped, before any new
    /// command starts): records still held by this process are left alone.
    pub fn clear(&self) {
        match self.slots() {
            Ok(slots) => {
                let mut book = slots.book.lock().unwrap_or_else(|p| p.into_inner());
                let zero = 0u32.to_le_bytes();
                for index in 0..book.slots.len() {
                    if book.slots[index] != PREVIOUS {
                        continue;
                    }
                    if let Err(err) = slots.file.write_all_at(&zero, (index * SLOT_BYTES) as u64) {
                        warn!(%err, "cannot clear a live-group record");
                    }
                    book.slots[index] = 0;
                    book.free.push(index);
                }
            }
            Err(err) => warn!(%err, "cannot open the live-group records"),
        }
        if let Ok(entries) = std::fs::read_dir(self.data.join(SPILL_DIR)) {
            for entry in entries.flatten() {
                remove(&entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(token: u64) -> RunningGroup {
        RunningGroup {
            token,
            pgid: 4242,
            boot: "boot".into(),
            start_ticks: 17,
        }
    }

    fn keys(live: &LiveGroups) -> Vec<(String, u64)> {
        live.read_all()
            .into_iter()
            .map(|(k, g)| (k, g.token))
            .collect()
    }

    #[test]
    fn records_last_until_dropped_and_slots_are_reused() {
        let dir = tempfile::tempdir().unwrap();
        let live = LiveGroups::new(dir.path());
        assert!(live.read_all().is_empty(), "no file yet reads as none");
        let a = live.record("job-1/0.1/1", &group(3)).unwrap();
        let b = live.record("job-1/0.1/1", &group(4)).unwrap();
        let c = live.record("job%2/0/1", &group(1)).unwrap();
        assert_eq!(
            keys(&live),
            [
                ("job%2/0/1".to_owned(), 1),
                ("job-1/0.1/1".to_owned(), 3),
                ("job-1/0.1/1".to_owned(), 4)
            ]
        );
        assert_eq!(live.read_all()[1].1, group(3));
        drop(a);
        assert_eq!(keys(&live).len(), 2);
        let d = live.record("job-3/0/1", &group(9)).unwrap();
        let len = std::fs::metadata(dir.path().join(SLOTS_FILE))
            .unwrap()
            .len();
        assert_eq!(len, 3 * SLOT_BYTES as u64, "the freed slot was reused");
        drop((b, c, d));
        assert!(live.read_all().is_empty());
    }

    #[test]
    fn a_key_too_long_for_a_slot_gets_its_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let live = LiveGroups::new(dir.path());
        let key = format!("job/{}/1", "0.".repeat(600));
        let long = live.record(&key, &group(2)).unwrap();
        assert_eq!(keys(&live), [(key, 2)]);
        drop(long);
        assert!(live.read_all().is_empty());
    }

    #[test]
    fn clear_forgets_the_previous_life_but_not_records_still_held() {
        let dir = tempfile::tempdir().unwrap();
        let live = LiveGroups::new(dir.path());
        // A previous life's slot, written straight into the file.
        let old = serde_json::to_vec(&Entry {
            key: "old/0/1".into(),
            group: group(1),
        })
        .unwrap();
        let mut bytes = (old.len() as u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(&old);
        bytes.resize(SLOT_BYTES, 0);
        // And a torn one.
        bytes.extend_from_slice(&40u32.to_le_bytes());
        bytes.extend_from_slice(b"{\"key\":\"to");
        bytes.resize(2 * SLOT_BYTES, 0);
        std::fs::write(dir.path().join(SLOTS_FILE), &bytes).unwrap();
        assert_eq!(keys(&live), [("old/0/1".to_owned(), 1)]);
        // A record made before the clear takes a new slot: the old ones stay readable.
        let held = live.record("new/0/1", &group(5)).unwrap();
        assert_eq!(keys(&live).len(), 2);
        live.clear();
        assert_eq!(keys(&live), [("new/0/1".to_owned(), 5)]);
        let again = live.record("again/0/1", &group(6)).unwrap();
        let len = std::fs::metadata(dir.path().join(SLOTS_FILE))
            .unwrap()
            .len();
        assert_eq!(len, 3 * SLOT_BYTES as u64, "cleared slots are reused");
        drop((held, again));
        assert!(live.read_all().is_empty());
    }
}
