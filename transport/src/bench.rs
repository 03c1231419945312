//! The tunnel benchmark behind `palm bench tunnel`: a real enrolled link on loopback
//! against a bare quinn echo of length-prefixed frames measured in the same run.
//!
//! **Link**: a root (in-memory trust book) and a child enrolled with a token, linked with
//! mTLS; the root answers every request with its body ([`Payload`]: 64 bytes, written
//! whole, as the bare echo writes them). Measured: 64-byte requests one at a
//! time (rate, RTT p50/p99) and with 64 in flight (rate), and bulk throughput through
//! [`Link::transfer`] streams.
//!
//! **Bare**: the same ring provider and TLS 1.3, no client certificate, one
//! bidirectional stream carrying `[u32 len][64 bytes]` frames that the server echoes
//! back per read. Pipelined twice: the client coalescing every frame it may send into
//! one write (the batching the link's writer does, so that ratio isolates the link's
//! own costs: ids, the pending map, tasks and channels, postcard), and with one write per
//! frame (the "framed on one stream" figure of design §8). Bulk: raw bytes on one
//! unidirectional stream.

use crate::codec::Hello;
use crate::config::LinkConfig;
use crate::endpoint::{LinkEvent, Listener, dial, enroll};
use crate::link::{Inbound, Link};
use crate::pki::{Role, TreeCa};
use crate::token::{Authority, TrustBook};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, mpsc};

/// Payload of one request.
pub const PAYLOAD_BYTES: usize = 64;

/// A request's body: opaque bytes, encoded as one length-prefixed byte string. (A plain
/// `Vec<u8>` goes through serde as a sequence of 64 separate integers, a cost of serde's
/// and not of the link, which no tree message pays: their strings and byte fields are
/// written whole.)
#[derive(Clone, Debug, PartialEq)]
pub struct Payload(pub Vec<u8>);

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl serde::de::Visitor<'_> for Bytes {
            type Value = Payload;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Payload, E> {
                Ok(Payload(bytes.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Payload, E> {
                Ok(Payload(bytes))
            }
        }
        deserializer.deserialize_byte_buf(Bytes)
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Seconds per rate measurement.
    pub seconds: f64,
    /// Requests in flight for the pipelined measurement.
    pub in_flight: usize,
    /// Bytes moved by each bulk measurement.
    pub bulk_bytes: usize,
    /// Rounds of link-then-bare measurements; ratios are the median of the rounds'.
    pub rounds: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            seconds: 2.0,
            in_flight: 64,
            bulk_bytes: 256 << 20,
            rounds: 3,
        }
    }
}

/// One side's figures.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Figures {
    /// Requests per second, one at a time.
    pub one_in_flight_per_s: f64,
    /// Requests per second with `in_flight` at once.
    pub pipelined_per_s: f64,
    /// RTT percentiles one at a time, µs.
    pub rtt_p50_us: f64,
    /// RTT 99th percentile one at a time, µs.
    pub rtt_p99_us: f64,
    /// Bulk throughput, MiB/s.
    pub bulk_mib_per_s: f64,
}

/// One round's rates, link and bare measured back to back.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Round {
    /// The link one at a time, requests per second.
    pub link_one_in_flight_per_s: f64,
    /// The bare echo one at a time.
    pub bare_one_in_flight_per_s: f64,
    /// The link with `in_flight` at once.
    pub link_pipelined_per_s: f64,
    /// The bare echo with `in_flight` at once, coalescing writes.
    pub bare_pipelined_per_s: f64,
    /// The bare echo with `in_flight` at once, one write per frame.
    pub bare_per_frame_writes_per_s: f64,
}

/// The ratios, each the median of the rounds' ratios.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Ratios {
    /// link / bare (coalesced writes) with `in_flight` at once.
    pub pipelined_ratio: f64,
    /// link / bare (one write per frame) with `in_flight` at once.
    pub pipelined_ratio_per_frame: f64,
    /// link / bare one at a time.
    pub one_in_flight_ratio: f64,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct TunnelReport {
    /// The ratios (median of the rounds'), as every `palm bench` reports them.
    pub ratio: Ratios,
    /// Each round's rates.
    pub rounds: Vec<Round>,
    /// The enrolled mTLS link (rates: medians over the rounds; RTTs over all rounds).
    pub link: Figures,
    /// The bare framed quinn echo.
    pub bare: Figures,
    /// `ratio.pipelined_ratio`, also at the top level as earlier reports had it.
    pub pipelined_ratio: f64,
    /// The bare echo's pipelined rate with one write per frame (design §8's "framed").
    pub bare_per_frame_writes_per_s: f64,
    /// `ratio.pipelined_ratio_per_frame`.
    pub pipelined_ratio_per_frame: f64,
    /// `ratio.one_in_flight_ratio`.
    pub one_in_flight_ratio: f64,
    /// Requests in flight for the pipelined rate.
    pub in_flight: usize,
    /// Payload bytes per request.
    pub payload_bytes: usize,
}

fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1e6
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
/// Every `palm bench` takes its medians here.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Runs both measurements, interleaved in rounds (see the module docs).
pub async fn tunnel(options: &BenchOptions) -> Result<TunnelReport, String> {
    let link_rig = LinkRig::start().await?;
    let mut bare_rig = BareRig::start().await?;
    let mut rounds = Vec::new();
    let (mut link_rtts, mut bare_rtts) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds.max(1) {
        let (link_one, rtts) = link_rig.one_at_a_time(options.seconds).await?;
        link_rtts.extend(rtts);
        let (bare_one, rtts) = bare_rig.one_at_a_time(options.seconds).await?;
        bare_rtts.extend(rtts);
        let link_pipelined = pipelined_link(&link_rig.link, options).await?;
        let bare_pipelined_per_s =
            bare_pipelined(&bare_rig.conn, &bare_rig.frame, options, true).await?;
        let per_frame = bare_pipelined(&bare_rig.conn, &bare_rig.frame, options, false).await?;
        rounds.push(Round {
            link_one_in_flight_per_s: link_one,
            bare_one_in_flight_per_s: bare_one,
            link_pipelined_per_s: link_pipelined,
            bare_pipelined_per_s,
            bare_per_frame_writes_per_s: per_frame,
        });
    }
    let link_bulk = bulk_link(&link_rig.link, &link_rig.bulk_received, options.bulk_bytes).await?;
    let bare_bulk = bare_rig.bulk(options.bulk_bytes).await?;
    link_rig.stop().await;
    bare_rig.stop();
    link_rtts.sort();
    bare_rtts.sort();
    let of = |f: fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    let ratio_of = |num: fn(&Round) -> f64, den: fn(&Round) -> f64| {
        median(rounds.iter().map(|r| num(r) / den(r).max(1e-9)).collect())
    };
    let ratio = Ratios {
        pipelined_ratio: ratio_of(|r| r.link_pipelined_per_s, |r| r.bare_pipelined_per_s),
        pipelined_ratio_per_frame: ratio_of(
            |r| r.link_pipelined_per_s,
            |r| r.bare_per_frame_writes_per_s,
        ),
        one_in_flight_ratio: ratio_of(
            |r| r.link_one_in_flight_per_s,
            |r| r.bare_one_in_flight_per_s,
        ),
    };
    Ok(TunnelReport {
        pipelined_ratio: ratio.pipelined_ratio,
        pipelined_ratio_per_frame: ratio.pipelined_ratio_per_frame,
        one_in_flight_ratio: ratio.one_in_flight_ratio,
        bare_per_frame_writes_per_s: of(|r| r.bare_per_frame_writes_per_s),
        link: Figures {
            one_in_flight_per_s: of(|r| r.link_one_in_flight_per_s),
            pipelined_per_s: of(|r| r.link_pipelined_per_s),
            rtt_p50_us: percentile_us(&link_rtts, 0.5),
            rtt_p99_us: percentile_us(&link_rtts, 0.99),
            bulk_mib_per_s: link_bulk,
        },
        bare: Figures {
            one_in_flight_per_s: of(|r| r.bare_one_in_flight_per_s),
            pipelined_per_s: of(|r| r.bare_pipelined_per_s),
            rtt_p50_us: percentile_us(&bare_rtts, 0.5),
            rtt_p99_us: percentile_us(&bare_rtts, 0.99),
            bulk_mib_per_s: bare_bulk,
        },
        ratio,
        rounds,
        in_flight: options.in_flight,
        payload_bytes: PAYLOAD_BYTES,
    })
}

/// A root and an enrolled child linked with mTLS on loopback; the root echoes requests.
struct LinkRig {
    link: Link<Payload>,
    listener: Listener<Payload>,
    bulk_received: Arc<AtomicU64>,
    _endpoint: quinn::Endpoint,
}

impl LinkRig {
    async fn start() -> Result<LinkRig, String> {
        let config = LinkConfig {
            transfer_len_max: 16 << 20,
            ..LinkConfig::default()
        };
        let ca = TreeCa::generate().map_err(|e| e.to_string())?;
        let root_identity = ca.issue_identity("bench-root").map_err(|e| e.to_string())?;
        let authority = Arc::new(Authority::new(ca, TrustBook::default(), None));
        let (tx, mut events) = mpsc::channel::<LinkEvent<Payload>>(64);
        let hello = Hello {
            name: "bench-root".into(),
            role: Role::Root,
            node_id: root_identity.node_id(),
            software: env!("CARGO_PKG_VERSION").into(),
        };
        let listener = Listener::bind(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            &root_identity,
            Arc::clone(&authority),
            hello,
            config.clone(),
            tx,
        )
        .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().ok_or("listener has no address")?;
        let bulk_received = Arc::new(AtomicU64::new(0));
        let received = Arc::clone(&bulk_received);
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                if let LinkEvent::LinkUp { mut inbound, .. } = event {
                    let received = Arc::clone(&received);
                    tokio::spawn(async move {
                        while let Some(item) = inbound.recv().await {
                            match item {
                                Inbound::Request { body, responder } => {
                                    let _ = responder.respond(body).await;
                                }
                                Inbound::Transfer(t) => {
                                    received.fetch_add(t.bytes.len() as u64, Ordering::Relaxed);
                                }
                                Inbound::Message(_) => {}
                            }
                        }
                    });
                }
            }
        });
        let token = authority
            .create_token("bench-child", Role::Edge, 60_000, now_ms())
            .map_err(|e| e.to_string())?;
        let (identity, _) = enroll(&addr.to_string(), &token.encode(), &config)
            .await
            .map_err(|e| e.to_string())?;
        let client = crate::tls::client_config(&identity, &config).map_err(|e| e.to_string())?;
        let me = Hello {
            name: "bench-child".into(),
            role: Role::Edge,
            node_id: identity.node_id(),
            software: env!("CARGO_PKG_VERSION").into(),
        };
        let (endpoint, link, _inbound) =
            dial::<Payload>(&addr.to_string(), client, &me, &config).await?;
        let payload = Payload(vec![0x5a; PAYLOAD_BYTES]);
        // Warm up.
        for _ in 0..2_000 {
            link.request(payload.clone())
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(LinkRig {
            link,
            listener,
            bulk_received,
            _endpoint: endpoint,
        })
    }

    async fn one_at_a_time(&self, seconds: f64) -> Result<(f64, Vec<Duration>), String> {
        let payload = Payload(vec![0x5a; PAYLOAD_BYTES]);
        one_at_a_time(seconds, || {
            let link = self.link.clone();
            let payload = payload.clone();
            async move {
                link.request(payload)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        })
        .await
    }

    async fn stop(self) {
        self.link.close("bench done");
        self.listener.shutdown("bench done").await;
    }
}

async fn one_at_a_time<F, Fut>(seconds: f64, mut call: F) -> Result<(f64, Vec<Duration>), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut rtts = Vec::with_capacity(100_000);
    let started = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    while started.elapsed() < budget {
        let t = Instant::now();
        call().await?;
        rtts.push(t.elapsed());
    }
    Ok((rtts.len() as f64 / started.elapsed().as_secs_f64(), rtts))
}

async fn pipelined_link(link: &Link<Payload>, options: &BenchOptions) -> Result<f64, String> {
    // The harness's own cost per request stays out of the figure, as the bare echo's
    // does (it reads the clock and counts once per batch): the workers look at a flag a
    // timer sets rather than read the clock, and count on their own rather than on one
    // shared counter.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Instant::now();
    let timer = {
        let stop = Arc::clone(&stop);
        let budget = Duration::from_secs_f64(options.seconds);
        tokio::spawn(async move {
            tokio::time::sleep(budget).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let mut workers = Vec::new();
    for _ in 0..options.in_flight.max(1) {
        let link = link.clone();
        let stop = Arc::clone(&stop);
        workers.push(tokio::spawn(async move {
            let payload = Payload(vec![0x5a; PAYLOAD_BYTES]);
            let mut done = 0u64;
            while !stop.load(Ordering::Relaxed) {
                link.request(payload.clone())
                    .await
                    .map_err(|e| e.to_string())?;
                done += 1;
            }
            Ok::<u64, String>(done)
        }));
    }
    let mut done = 0;
    for worker in workers {
        done += worker.await.map_err(|e| e.to_string())??;
    }
    timer.abort();
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

async fn bulk_link(
    link: &Link<Payload>,
    received: &AtomicU64,
    total: usize,
) -> Result<f64, String> {
    let chunk = vec![0xa5u8; 8 << 20];
    let count = total.div_ceil(chunk.len()).max(1);
    let target = (count * chunk.len()) as u64;
    let started = Instant::now();
    for _ in 0..count {
        link.transfer(&chunk).await.map_err(|e| e.to_string())?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while received.load(Ordering::Relaxed) < target {
        if Instant::now() > deadline {
            return Err("bulk transfer did not complete within 60 s".into());
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Ok(target as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64())
}

/// The bare echo server's and client's QUIC configs: ring, TLS 1.3, a self-signed cert.
fn bare_configs() -> Result<(quinn::ServerConfig, quinn::ClientConfig), String> {
    let ca = TreeCa::generate().map_err(|e| e.to_string())?;
    let identity = ca.issue_identity("bare").map_err(|e| e.to_string())?;
    let link = LinkConfig::default();
    let mut server = rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(identity.chain(), identity.private_key())
        .map_err(|e| e.to_string())?;
    server.alpn_protocols = vec![b"bare".to_vec()];
    let server =
        quinn::crypto::rustls::QuicServerConfig::try_from(server).map_err(|e| e.to_string())?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(server));
    server.transport_config(Arc::new(link.transport()));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert().clone()).map_err(|e| e.to_string())?;
    let mut client = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"bare".to_vec()];
    let client =
        quinn::crypto::rustls::QuicClientConfig::try_from(client).map_err(|e| e.to_string())?;
    let mut client = quinn::ClientConfig::new(Arc::new(client));
    client.transport_config(Arc::new(link.transport()));
    Ok((server, client))
}

const BARE_FRAME: usize = 4 + PAYLOAD_BYTES;

/// A writer keeps `in_flight` frames outstanding on a fresh stream — coalescing what it
/// may send into one write, or one write per frame — and a reader counts echoed frames
/// and frees their slots.
async fn bare_pipelined(
    conn: &quinn::Connection,
    frame: &[u8],
    options: &BenchOptions,
    coalesce: bool,
) -> Result<f64, String> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    let in_flight = options.in_flight.max(1);
    let slots = Arc::new(Semaphore::new(in_flight));
    let done = Arc::new(AtomicU64::new(0));
    let budget = Duration::from_secs_f64(options.seconds);
    let deadline = Instant::now() + budget;
    let started = Instant::now();
    let reader = {
        let slots = Arc::clone(&slots);
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            let mut leftover = 0usize;
            while let Ok(Some(chunk)) = recv.read_chunk(64 << 10, true).await {
                leftover += chunk.bytes.len();
                let frames = leftover / BARE_FRAME;
                leftover %= BARE_FRAME;
                done.fetch_add(frames as u64, Ordering::Relaxed);
                slots.add_permits(frames);
            }
        })
    };
    let mut batch = Vec::with_capacity(in_flight * BARE_FRAME);
    while Instant::now() < deadline {
        let Ok(first) = slots.acquire().await else {
            break;
        };
        first.forget();
        let mut n = 1;
        while coalesce && n < in_flight {
            match slots.try_acquire() {
                Ok(permit) => {
                    permit.forget();
                    n += 1;
                }
                Err(_) => break,
            }
        }
        batch.clear();
        for _ in 0..n {
            batch.extend_from_slice(frame);
        }
        send.write_all(&batch).await.map_err(|e| e.to_string())?;
    }
    // Let the outstanding echoes come back, then count.
    let _ =
        tokio::time::timeout(Duration::from_secs(5), slots.acquire_many(in_flight as u32)).await;
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    let _ = send.finish();
    reader.abort();
    Ok(rate)
}

/// A bare quinn echo server and a client connection to it, with one stream kept for the
/// one-at-a-time rate.
struct BareRig {
    conn: quinn::Connection,
    server: quinn::Endpoint,
    _client: quinn::Endpoint,
    frame: Vec<u8>,
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    bulk_received: Arc<AtomicU64>,
}

impl BareRig {
    async fn start() -> Result<BareRig, String> {
        let (server_config, client_config) = bare_configs()?;
        let server = quinn::Endpoint::server(server_config, SocketAddr::from(([127, 0, 0, 1], 0)))
            .map_err(|e| e.to_string())?;
        let addr = server.local_addr().map_err(|e| e.to_string())?;
        let bulk_received = Arc::new(AtomicU64::new(0));
        tokio::spawn(bare_serve(server.clone(), Arc::clone(&bulk_received)));
        let client = quinn::Endpoint::client(SocketAddr::from(([127, 0, 0, 1], 0)))
            .map_err(|e| e.to_string())?;
        let conn = client
            .connect_with(client_config, addr, crate::SERVER_NAME)
            .map_err(|e| e.to_string())?
            .await
            .map_err(|e| e.to_string())?;
        let mut frame = Vec::with_capacity(BARE_FRAME);
        frame.extend_from_slice(&(PAYLOAD_BYTES as u32).to_be_bytes());
        frame.extend_from_slice(&[0x5a; PAYLOAD_BYTES]);
        let (send, recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
        let mut rig = BareRig {
            conn,
            server,
            _client: client,
            frame,
            send,
            recv,
            bulk_received,
        };
        // Warm up.
        let mut answer = [0u8; BARE_FRAME];
        for _ in 0..2_000 {
            rig.echo(&mut answer).await?;
        }
        Ok(rig)
    }

    async fn echo(&mut self, answer: &mut [u8; BARE_FRAME]) -> Result<(), String> {
        self.send
            .write_all(&self.frame)
            .await
            .map_err(|e| e.to_string())?;
        self.recv
            .read_exact(answer)
            .await
            .map_err(|e| e.to_string())
    }

    async fn one_at_a_time(&mut self, seconds: f64) -> Result<(f64, Vec<Duration>), String> {
        let mut answer = [0u8; BARE_FRAME];
        let mut rtts = Vec::with_capacity(100_000);
        let started = Instant::now();
        let budget = Duration::from_secs_f64(seconds);
        while started.elapsed() < budget {
            let t = Instant::now();
            self.echo(&mut answer).await?;
            rtts.push(t.elapsed());
        }
        Ok((rtts.len() as f64 / started.elapsed().as_secs_f64(), rtts))
    }

    /// Raw bytes on one unidirectional stream, MiB/s.
    async fn bulk(&self, total: usize) -> Result<f64, String> {
        let chunk = vec![0xa5u8; 8 << 20];
        let count = total.div_ceil(chunk.len()).max(1);
        let target = (count * chunk.len()) as u64;
        let started = Instant::now();
        let mut stream = self.conn.open_uni().await.map_err(|e| e.to_string())?;
        for _ in 0..count {
            stream.write_all(&chunk).await.map_err(|e| e.to_string())?;
        }
        stream.flush().await.map_err(|e| e.to_string())?;
        let _ = stream.finish();
        let wait_deadline = Instant::now() + Duration::from_secs(60);
        while self.bulk_received.load(Ordering::Relaxed) < target {
            if Instant::now() > wait_deadline {
                return Err("bare bulk did not complete within 60 s".into());
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        Ok(target as f64 / (1 << 20) as f64 / started.elapsed().as_secs_f64())
    }

    fn stop(mut self) {
        let _ = self.send.finish();
        self.conn.close(quinn::VarInt::from_u32(0), b"bench done");
        self.server.close(quinn::VarInt::from_u32(0), b"bench done");
    }
}

/// The bare server: echoes whole frames on every bidirectional stream, one write per
/// read, and counts the bytes of unidirectional streams.
async fn bare_serve(server: quinn::Endpoint, received: Arc<AtomicU64>) {
    while let Some(incoming) = server.accept().await {
        let received = Arc::clone(&received);
        tokio::spawn(async move {
            let Ok(conn) = incoming.await else { return };
            let echo_conn = conn.clone();
            tokio::spawn(async move {
                while let Ok((mut send, mut recv)) = echo_conn.accept_bi().await {
                    tokio::spawn(async move {
                        let mut pending: Vec<u8> = Vec::with_capacity(64 << 10);
                        while let Ok(Some(chunk)) = recv.read_chunk(64 << 10, true).await {
                            pending.extend_from_slice(&chunk.bytes);
                            let mut whole = 0;
                            while pending.len() - whole >= 4 {
                                let mut len = [0u8; 4];
                                len.copy_from_slice(&pending[whole..whole + 4]);
                                let len = u32::from_be_bytes(len) as usize;
                                if pending.len() - whole < 4 + len {
                                    break;
                                }
                                whole += 4 + len;
                            }
                            if whole > 0 {
                                if send.write_all(&pending[..whole]).await.is_err() {
                                    return;
                                }
                                pending.drain(..whole);
                            }
                        }
                    });
                }
            });
            while let Ok(mut stream) = conn.accept_uni().await {
                let received = Arc::clone(&received);
                tokio::spawn(async move {
                    while let Ok(Some(chunk)) = stream.read_chunk(1 << 20, false).await {
                        received.fetch_add(chunk.bytes.len() as u64, Ordering::Relaxed);
                    }
                });
            }
        });
    }
}
