"""Tick a trace SPEC with py_trees and print what `palm flows trace` prints.

Usage: python pytrace.py SPEC.json --ticks N

The SPEC grammar is the one of `palm flows trace` (see actors/src/bt/trace.rs). Leaves
are scripted: each tick returns the next status of `queue`, then `eventually` (running
when null). Output: one JSON line per tick, {"tick": N, "status": {name: letter}} in
pre-order, with I for INVALID.
"""

import argparse
import json
import sys

import py_trees
from py_trees.common import ParallelPolicy, Status

LETTERS = {Status.SUCCESS: "S", Status.FAILURE: "F", Status.RUNNING: "R", Status.INVALID: "I"}
STATUSES = {"S": Status.SUCCESS, "F": Status.FAILURE, "R": Status.RUNNING}


class Scripted(py_trees.behaviour.Behaviour):
    def __init__(self, name, queue, eventually):
        super().__init__(name)
        self.queue = list(queue)
        self.position = 0
        self.eventually = eventually

    def update(self):
        if self.position < len(self.queue):
            letter = self.queue[self.position]
            self.position += 1
        else:
            letter = self.eventually or "R"
        return STATUSES[letter]


def build(spec):
    kind = spec["type"]
    name = spec["name"]
    if kind == "seq":
        return py_trees.composites.Sequence(
            name, memory=spec.get("memory", True), children=[build(c) for c in spec["children"]]
        )
    if kind == "sel":
        return py_trees.composites.Selector(
            name, memory=spec.get("memory", True), children=[build(c) for c in spec["children"]]
        )
    if kind == "par":
        if spec["policy"] == "all":
            policy = ParallelPolicy.SuccessOnAll(synchronise=spec.get("synchronise", True))
        else:
            policy = ParallelPolicy.SuccessOnOne()
        return py_trees.composites.Parallel(
            name, policy=policy, children=[build(c) for c in spec["children"]]
        )
    if kind == "inv":
        return py_trees.decorators.Inverter(name, build(spec["child"]))
    if kind == "force_success":
        return py_trees.decorators.FailureIsSuccess(name, build(spec["child"]))
    if kind == "force_failure":
        return py_trees.decorators.SuccessIsFailure(name, build(spec["child"]))
    if kind == "leaf":
        return Scripted(name, spec.get("queue", []), spec.get("eventually"))
    raise ValueError(f"unknown type {kind}")


def preorder(node):
    yield node
    for child in node.children:
        yield from preorder(child)


def trace(spec, ticks):
    root = build(spec)
    lines = []
    for tick in range(1, ticks + 1):
        root.tick_once()
        status = ", ".join(
            f"{json.dumps(node.name)}: \"{LETTERS[node.status]}\"" for node in preorder(root)
        )
        lines.append(f'{{"tick": {tick}, "status": {{{status}}}}}')
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("--ticks", type=int, required=True)
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)
    for line in trace(spec, args.ticks):
        print(line)


if __name__ == "__main__":
    sys.exit(main())
