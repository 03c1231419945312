"""Trace specs for the py_trees cross-check: a hand-written suite covering every
composite, decorator, memory and policy setting, and a seeded random generator."""

import random


def leaf(name, queue, eventually=None):
    return {"type": "leaf", "name": name, "queue": queue, "eventually": eventually}


def suite():
    """Named specs, each a dict with spec and ticks."""
    specs = {}
    for memory in (True, False):
        m = "mem" if memory else "nomem"
        specs[f"seq-{m}-basic"] = {"type": "seq", "memory": memory, "name": "root", "children": [
            leaf("a", ["S", "S", "F", "S"], "S"), leaf("b", ["R", "S", "R", "R"], "S"), leaf("c", ["S", "F"], "S")]}
        specs[f"seq-{m}-guard-flips"] = {"type": "seq", "memory": memory, "name": "root", "children": [
            leaf("guard", ["S", "S", "F", "S", "S"], "S"), leaf("work", ["R", "R", "R", "R", "S"], "S")]}
        specs[f"sel-{m}-basic"] = {"type": "sel", "memory": memory, "name": "root", "children": [
            leaf("a", ["F", "F", "R", "S", "F"], "F"), leaf("b", ["R", "R", "F", "S"], "R"), leaf("c", ["S"], "S")]}
        specs[f"sel-{m}-priority-interrupt"] = {"type": "sel", "memory": memory, "name": "root", "children": [
            leaf("high", ["F", "F", "S", "F", "F"], "F"), leaf("low", ["R", "R", "R", "R"], "S")]}
        specs[f"nested-{m}"] = {"type": "seq", "memory": memory, "name": "root", "children": [
            {"type": "sel", "memory": not memory, "name": "choose", "children": [
                leaf("x", ["F", "R", "S"], "F"), leaf("y", ["R", "S", "F"], "S")]},
            {"type": "seq", "memory": memory, "name": "then", "children": [
                leaf("p", ["S", "R", "S"], "S"), leaf("q", ["R", "F", "S"], "S")]}]}
    specs["seq-empty"] = {"type": "seq", "memory": True, "name": "root", "children": []}
    specs["sel-empty"] = {"type": "sel", "memory": False, "name": "root", "children": []}
    for sync in (True, False):
        s = "sync" if sync else "nosync"
        specs[f"par-all-{s}"] = {"type": "par", "policy": "all", "synchronise": sync, "name": "root", "children": [
            leaf("a", ["S", "R", "S"], "S"), leaf("b", ["R", "R", "S", "F"], "S"), leaf("c", ["R", "S", "R"], "R")]}
        specs[f"par-all-{s}-failure"] = {"type": "par", "policy": "all", "synchronise": sync, "name": "root", "children": [
            leaf("a", ["S", "S", "S"], "S"), leaf("b", ["R", "F", "R"], "R")]}
    specs["par-one"] = {"type": "par", "policy": "one", "name": "root", "children": [
        leaf("a", ["R", "R", "S", "R"], "R"), leaf("b", ["R", "R", "R", "F"], "R"), leaf("c", ["R", "S"], "F")]}
    specs["par-one-failure-wins"] = {"type": "par", "policy": "one", "name": "root", "children": [
        leaf("a", ["S"], "S"), leaf("b", ["F"], "F")]}
    specs["par-empty"] = {"type": "par", "policy": "all", "name": "root", "children": []}
    for kind in ("inv", "force_success", "force_failure"):
        specs[f"{kind}-leaf"] = {"type": kind, "name": "root", "child": leaf("a", ["S", "F", "R", "S", "F"], "R")}
        specs[f"{kind}-composite"] = {"type": "seq", "memory": False, "name": "root", "children": [
            {"type": kind, "name": "dec", "child": {"type": "sel", "memory": True, "name": "inner", "children": [
                leaf("a", ["F", "R", "F"], "S"), leaf("b", ["R", "S", "F"], "F")]}},
            leaf("after", ["R", "S"], "S")]}
    specs["par-under-reactive-sel"] = {"type": "sel", "memory": False, "name": "root", "children": [
        leaf("guard", ["F", "F", "S", "F"], "F"),
        {"type": "par", "policy": "all", "synchronise": True, "name": "both", "children": [
            leaf("l", ["R", "R", "R", "S"], "S"), leaf("r", ["R", "S"], "S")]}]}
    return {name: {"spec": spec, "ticks": 8} for name, spec in specs.items()}


def random_spec(rng, max_depth=4):
    counter = [0]

    def name(prefix):
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def node(depth):
        if depth >= max_depth or rng.random() < 0.3:
            queue = [rng.choice("SFR") for _ in range(rng.randint(0, 6))]
            return leaf(name("l"), queue, rng.choice(["S", "F", "R", None]))
        kind = rng.choice(["seq", "sel", "par", "inv", "force_success", "force_failure", "seq", "sel"])
        if kind in ("inv", "force_success", "force_failure"):
            return {"type": kind, "name": name(kind[:3]), "child": node(depth + 1)}
        children = [node(depth + 1) for _ in range(rng.randint(0, 4))]
        if kind == "par":
            policy = rng.choice(["all", "one"])
            spec = {"type": "par", "policy": policy, "name": name("par"), "children": children}
            if policy == "all":
                spec["synchronise"] = rng.choice([True, False])
            return spec
        return {"type": kind, "memory": rng.choice([True, False]), "name": name(kind), "children": children}

    return node(0)


def random_suite(seed, count):
    rng = random.Random(seed)
    return {f"random-{seed}-{i:03d}": {"spec": random_spec(rng), "ticks": 10} for i in range(count)}
