#!/usr/bin/env python3
"""Where `palm bench tree`'s completion -> home time goes, hop by hop, from kernel traces.

Not part of the test suite (it needs root, `perf` and tracefs): the reproducer behind the
per-hop figures in docs/ARCHITECTURE.md. It puts uprobes on a few functions of the
`palm` binary (the hop core taking a frame, the hop task, the kernel taking a message,
the seal, the redb commit, the link's frame decoder, quinn handling a datagram), records
them system-wide with the UDP, fdatasync and child-reaping system calls while
`palm bench tree --rounds 1` runs, and then follows each one-at-a-time completion from
the `date` effect's exit to the home's fdatasync, on the tree and on the all-in-one
baseline:

    sudo python3 tests/perf/tree_hops.py target/release/palm [--samples 200]

Each line is one step's median (and quartiles) in microseconds, and the median time from
the effect's exit. A traced system call or uprobe costs a few microseconds, so the sums
run above the benchmark's own figures; compare steps, and the tree against the baseline
traced in the same run. The binary needs its symbols (the default release profile
strips debug info only).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

TRACEFS = "/sys/kernel/tracing"
GROUP = "palmhop"

# Probe name -> the start of the mangled symbol (legacy Rust mangling, hash elided).
PROBES = {
    "hop_frame": "_ZN13palm_topology3hop7HopCore12handle_frame17",
    "hop_task": "_ZN9palm_node3hop7HopTask6handle17",
    "kernel": "_ZN9palm_node6genome6kernel10handle_one17",
    "seal": "_ZN9palm_node6genome6kernel11KernelState4seal17",
    "commit": "_ZN81_$LT$palm_actors..store..redb..RedbStore$u20$as$u20$"
    "palm_actors..store..Store$GT$6commit17",
    "quinn_event": "_ZN11quinn_proto10connection10Connection12handle_event17",
}
# Every instance of the (generic) frame decoder.
DECODER = "_ZN14palm_transport5codec12FrameDecoder10next_frame17"

SYSCALLS = [
    "syscalls:sys_enter_sendmsg",
    "syscalls:sys_exit_recvmmsg",
    "syscalls:sys_enter_fdatasync",
    "syscalls:sys_exit_fdatasync",
    "syscalls:sys_enter_wait4",
    "sched:sched_process_exit",
]


def fail(message):
    sys.exit(f"tree_hops: {message}")


def file_offsets(binary):
    """Symbol -> file offset of every text symbol (uprobes take file offsets)."""
    segments = []
    for line in subprocess.run(
        ["readelf", "-lW", binary], capture_output=True, text=True, check=True
    ).stdout.splitlines():
        fields = line.split()
        if fields[:1] == ["LOAD"] and "E" in fields[6:-1]:
            segments.append((int(fields[2], 16), int(fields[1], 16), int(fields[4], 16)))
    offsets = {}
    for line in subprocess.run(
        ["nm", binary], capture_output=True, text=True, check=True
    ).stdout.splitlines():
        fields = line.split()
        if len(fields) != 3 or fields[1] not in "tT":
            continue
        address = int(fields[0], 16)
        for vaddr, offset, size in segments:
            if vaddr <= address < vaddr + size:
                offsets[fields[2]] = address - vaddr + offset
    return offsets


def write_events(line):
    """One line to uprobe_events (appending: Python's "a" mode seeks, which tracefs refuses)."""
    fd = os.open(f"{TRACEFS}/uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def set_probes(binary):
    offsets = file_offsets(binary)
    lines = []
    for name, prefix in PROBES.items():
        matches = sorted(symbol for symbol in offsets if symbol.startswith(prefix))
        if not matches:
            fail(f"no symbol {prefix}… in {binary} (stripped, or renamed?)")
        lines.append(f"p:{GROUP}/{name} {binary}:{offsets[matches[0]]:#x}")
    decoders = sorted(symbol for symbol in offsets if symbol.startswith(DECODER))
    for index, symbol in enumerate(decoders):
        lines.append(f"p:{GROUP}/decoder{index} {binary}:{offsets[symbol]:#x}")
    for line in lines:
        try:
            write_events(line)
        except OSError as err:
            fail(f"the kernel refused the uprobe `{line}`: {err}")


def clear_probes():
    try:
        with open(f"{TRACEFS}/uprobe_events") as events:
            ours = [line.split()[0] for line in events if f":{GROUP}/" in line]
        for probe in ours:
            write_events("-:" + probe.split(":", 1)[1])
    except OSError:
        pass


def record(binary, samples, scratch):
    data = os.path.join(scratch, "perf.data")
    events = [arg for event in SYSCALLS + [f"{GROUP}:*"] for arg in ("-e", event)]
    perf = subprocess.Popen(
        ["perf", "record", "-a", "-m", "2048", "-o", data, *events],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.5)
    bench = subprocess.Popen(
        [binary, "bench", "tree", "--rounds", "1", "--effects", "100",
         "--samples", str(samples), "--json", "--data", os.path.join(scratch, "bench")],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    roles = {}
    while bench.poll() is None:
        listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True)
        for line in listing.stdout.splitlines():
            match = re.search(r"^\s*(\d+) .* up --profile (\S+) --name (\S+)", line)
            if match:
                roles[int(match.group(1))] = match.group(3)
        time.sleep(0.5)
    report = json.loads(bench.stdout.read() or "null")
    perf.send_signal(2)
    perf.wait()
    script = subprocess.run(
        ["perf", "script", "-i", data, "-F", "comm,pid,tid,time,event,trace"],
        capture_output=True,
        text=True,
    ).stdout
    return report, roles, script


LINE = re.compile(r"\s*(\S.*?)\s+(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)")


def parse(script):
    events = []
    for line in script.splitlines():
        match = LINE.match(line)
        if match:
            _, pid, _, when, event, detail = match.groups()
            event = event.replace("syscalls:sys_", "").replace(f"{GROUP}:", "")
            events.append((float(when), int(pid), event, detail))
    events.sort(key=lambda event: event[0])
    return events


def timelines(events, roles):
    def named(prefix):
        return {pid for pid, name in roles.items() if name.startswith(prefix)}

    found = {role: named(role) for role in ("root", "realm", "aio")}
    for role, pids in found.items():
        if len(pids) != 1:
            fail(f"saw {len(pids)} `palm up` processes named {role}* while the bench ran, not one "
                 f"(the script reads their names from `ps`; seen: {sorted(roles.values())})")
    edges = named("edge")
    (root,), (realm,), (aio,) = found["root"], found["realm"], found["aio"]

    def after(index, test, within=0.01):
        for later in range(index + 1, len(events)):
            if events[later][0] - events[index][0] > within:
                return None
            if test(events[later]):
                return later
        return None

    def at(pid, name):
        return lambda event: event[1] == pid and event[2] == name

    def received(pid):
        return lambda event: event[1] == pid and event[2] == "exit_recvmmsg" and not event[3].startswith("0xf")

    def decoded(pid):
        return lambda event: event[1] == pid and event[2].startswith("decoder")

    exits = [i for i, event in enumerate(events) if event[2] == "sched:sched_process_exit" and "comm=date" in event[3]]
    tree, baseline = [], []
    for n, index in enumerate(exits):
        # One job at a time only: no other effect ended within 1.5 ms either side.
        when = events[index][0]
        if (n and when - events[exits[n - 1]][0] < 1.5e-3) or (
            n + 1 < len(exits) and events[exits[n + 1]][0] - when < 1.5e-3
        ):
            continue
        reap = after(index, lambda e: e[2] == "enter_wait4" and e[1] in edges | {aio} and "upid: 0xffffffff" not in e[3])
        if reap is None:
            continue
        runner = events[reap][1]
        if runner == aio:
            steps = [at(aio, "kernel"), at(aio, "seal"), at(aio, "commit"), at(aio, "enter_fdatasync"), at(aio, "exit_fdatasync")]
        else:
            steps = [
                at(runner, "hop_task"), at(runner, "enter_sendmsg"),
                received(realm), at(realm, "quinn_event"), decoded(realm), at(realm, "hop_frame"), at(realm, "enter_sendmsg"),
                received(root), at(root, "quinn_event"), decoded(root), at(root, "hop_frame"),
                at(root, "kernel"), at(root, "seal"), at(root, "commit"), at(root, "enter_fdatasync"), at(root, "exit_fdatasync"),
            ]
        chain = [index, reap]
        for step in steps:
            found = after(chain[-1], step)
            if found is None:
                break
            chain.append(found)
        else:
            (baseline if runner == aio else tree).append([events[i][0] for i in chain])
    return tree, baseline


STEPS = {
    "tree": ["effect exits", "edge reaps it", "edge hop task", "edge sends", "realm receives", "realm quinn",
             "realm decodes", "realm hop core", "realm sends", "root receives", "root quinn", "root decodes",
             "root hop core", "root kernel", "root seals", "root commits", "root fdatasync", "fdatasync ends"],
    "baseline": ["effect exits", "node reaps it", "kernel", "seals", "commits", "fdatasync", "fdatasync ends"],
}


def show(name, rows):
    print(f"{name}: {len(rows)} completions")
    if len(rows) < 4:
        return
    for column, step in enumerate(STEPS[name][1:], start=1):
        steps = [(row[column] - row[column - 1]) * 1e6 for row in rows]
        total = [(row[column] - row[0]) * 1e6 for row in rows]
        q1, median, q3 = statistics.quantiles(steps, n=4)
        print(f"  {step:<16} {median:6.0f} µs  ({q1:4.0f}–{q3:4.0f})   from the exit {statistics.median(total):6.0f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("palm", help="the palm binary (a release build)")
    parser.add_argument("--samples", type=int, default=200, help="one-at-a-time jobs per setup")
    args = parser.parse_args()
    if os.geteuid() != 0:
        fail("uprobes and system-wide tracepoints need root")
    binary = os.path.realpath(args.palm)
    clear_probes()
    set_probes(binary)
    try:
        with tempfile.TemporaryDirectory(prefix="palm-tree-hops-") as scratch:
            report, roles, script = record(binary, args.samples, scratch)
    finally:
        clear_probes()
    if not report:
        fail("`palm bench tree` printed no report")
    tree, baseline = timelines(parse(script), roles)
    ratio = report["ratio"]["completion_to_home_p50_tree_over_baseline"]
    print(f"bench (traced): completion -> home p50 {report['tree']['completion_to_home_ms']['p50']:.3f} ms "
          f"against {report['baseline']['completion_to_home_ms']['p50']:.3f} ms ({ratio:.2f}x)")
    show("tree", tree)
    show("baseline", baseline)


if __name__ == "__main__":
    main()
