"""Print fresh random trace cases with py_trees' own answers, for the live cross-check.

Usage: python crosscheck.py --seed S --count N
Prints a JSON list of {"spec", "ticks", "expected"}; the Rust test
(actors/tests/trace_py_trees.rs) ticks each spec with Palm and compares.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import pytrace  # noqa: E402
import specs  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()
    cases = []
    for name, case in sorted(specs.random_suite(args.seed, args.count).items()):
        cases.append({"name": name, "spec": case["spec"], "ticks": case["ticks"],
                      "expected": pytrace.trace(case["spec"], case["ticks"])})
    json.dump(cases, sys.stdout)


if __name__ == "__main__":
    main()
