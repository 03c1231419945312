"""Regenerates actors/tests/fixtures/trace/*.json from py_trees itself.

Run: python tests/py_trees/gen_fixtures.py   (needs py_trees==2.6.0)
Each fixture holds the spec, the tick count and the lines py_trees printed.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import pytrace  # noqa: E402
import specs  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "actors", "tests", "fixtures", "trace")


def main():
    import py_trees

    from py_trees import version

    assert version.__version__ == "2.6.0", version.__version__
    os.makedirs(OUT, exist_ok=True)
    cases = dict(specs.suite())
    cases.update(specs.random_suite(seed=20261202, count=150))
    for name, case in sorted(cases.items()):
        expected = pytrace.trace(case["spec"], case["ticks"])
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump({"spec": case["spec"], "ticks": case["ticks"], "expected": expected}, f, indent=1)
            f.write("\n")
    print(f"wrote {len(cases)} fixtures to {os.path.normpath(OUT)}")


if __name__ == "__main__":
    main()
