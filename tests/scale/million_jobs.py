#!/usr/bin/env python3
"""A million small jobs through a real node, collected by `palm jobs gc` between rounds.

Not part of the test suite (it takes minutes): the reproducer behind the retention
figures in the issue notes. It starts `palm up` on a fresh data directory, submits ROUNDS
rounds of jobs (one `set` step each) over the control socket from CONNECTIONS connections,
and after each round runs `palm jobs gc --keep 0s --keep-summaries 0s`, printing the store
file's size and the node's resident memory before and after.

    python3 tests/scale/million_jobs.py target/release/palm [--jobs 1000000] [--rounds 4]
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

FLOW = "name: tiny\ntree:\n  set: { done: true }\n"


def call(sock_file, request):
    line = (json.dumps(request) + "\n").encode()
    sock_file.write(line)
    sock_file.flush()
    answer = json.loads(sock_file.readline())
    if not answer.get("ok"):
        raise RuntimeError(f"{request['op']} failed: {answer}")
    return answer["result"]


def connect(data):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.path.join(data, "palm.sock"))
    return sock.makefile("rwb")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def store_mib(data):
    return os.path.getsize(os.path.join(data, "palm.redb")) / (1 << 20)


def submit_many(data, count, connections):
    per = count // connections
    errors = []

    def worker(n):
        try:
            f = connect(data)
            for _ in range(n):
                call(f, {"op": "submit", "flow": {"name": "tiny"}})
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(per,)) for _ in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return per * connections


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("palm")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    data = tempfile.mkdtemp(prefix="palm-million-")
    node = subprocess.Popen(
        [args.palm, "--data", data, "up", "--seats", "2"],
        env={**os.environ, "PALM_LOG": "warn"},
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            if os.path.exists(os.path.join(data, "palm.sock")):
                try:
                    call(connect(data), {"op": "ping"})
                    break
                except OSError:
                    pass
            time.sleep(0.05)
        call(connect(data), {"op": "flows_add", "source": FLOW, "origin": "tiny.yaml"})
        total = 0
        per_round = args.jobs // args.rounds
        for round_no in range(1, args.rounds + 1):
            started = time.time()
            total += submit_many(data, per_round, args.connections)
            took = time.time() - started
            before = (store_mib(data), rss_mib(node.pid))
            started = time.time()
            gc = subprocess.run(
                [args.palm, "--data", data, "--json", "jobs", "gc", "--keep", "0s",
                 "--keep-summaries", "0s"],
                capture_output=True, text=True, check=True,
            )
            gc_took = time.time() - started
            report = json.loads(gc.stdout)
            after = (store_mib(data), rss_mib(node.pid))
            print(
                f"round {round_no}: {total:,} jobs so far ({per_round / took:,.0f}/s); "
                f"before gc store {before[0]:.1f} MiB rss {before[1]:.1f} MiB; "
                f"gc forgot {report['forgotten']:,} in {gc_took:.1f}s; "
                f"after gc store {after[0]:.1f} MiB rss {after[1]:.1f} MiB",
                flush=True,
            )
        left = call(connect(data), {"op": "jobs"})
        print(f"jobs left listed: {len(left['jobs'])}")
    finally:
        node.terminate()
        node.wait(timeout=30)
        subprocess.run(["rm", "-rf", data], check=False)


if __name__ == "__main__":
    sys.exit(main())
