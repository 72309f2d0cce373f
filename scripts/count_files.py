"""How many project files one training update goes through: a count anyone can rerun.

    python3 scripts/count_files.py                      # transformer-train debug=fast model=tiny
    python3 scripts/count_files.py experiment=tatoeba   # any overrides of transformer-train

Runs ``transformer-train`` in this process with a profiler (``sys.setprofile``) that notes the
file of every Python function that runs, from the command's start to the end of the first
update (the first ``on_train_batch_end`` hook: forward, loss, backward and optimizer step are
done), and separately those run inside ``training_step`` (forward and loss). Functions that
run count; imports (a module's body and what it calls) do not. Only files of the ``transformer`` package count. The run writes to
a temporary folder, removed afterwards. ``--json FILE`` also writes the lists, and the functions that ran in each file.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "transformer"


def count(overrides: list[str]) -> dict:
    from transformer.cli import train

    seen: dict[str, set[str]] = {"update": set(), "training_step": set()}
    functions: dict[str, set[str]] = {}
    state = {"recording": True, "inside": None, "importing": 0}

    def project(frame) -> str | None:
        path = frame.f_code.co_filename
        return str(Path(path).relative_to(REPO)) if path.startswith(str(PACKAGE)) else None

    def profile(frame, event, arg):
        if not state["recording"]:
            return
        name = frame.f_code.co_name
        if name == "<module>":  # an import runs a module's body: not counted, nor what it calls
            state["importing"] += 1 if event == "call" else -1 if event == "return" else 0
            return
        if state["importing"]:
            return
        if event == "call":
            if name == "on_train_batch_end":  # the first update is complete
                state["recording"] = False
                return
            where = project(frame)
            if where is None:
                return
            seen["update"].add(where)
            functions.setdefault(where, set()).add(frame.f_code.co_qualname)
            if state["inside"] is not None:
                seen["training_step"].add(where)
            elif name == "training_step":
                state["inside"] = frame
                seen["training_step"].add(where)
        elif event == "return" and frame is state["inside"]:
            state["inside"] = None

    with tempfile.TemporaryDirectory() as tmp:
        argv = sys.argv
        sys.argv = ["transformer-train", *overrides, f"hydra.run.dir={tmp}/run"]
        sys.setprofile(profile)
        threading.setprofile(profile)
        try:
            train.main()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            sys.argv = argv
    return {"command": " ".join(["transformer-train", *overrides]),
            "update_files": sorted(seen["update"]), "training_step_files": sorted(seen["training_step"]),
            "functions": {f: sorted(names) for f, names in sorted(functions.items())}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="also write the file lists here")
    args, overrides = ap.parse_known_args(argv)
    result = count(overrides or ["debug=fast", "model=tiny"])
    print(f"{result['command']}:")
    print(f"  files run from the command to the end of the first update: {len(result['update_files'])}")
    for f in result["update_files"]:
        print(f"    {f}")
    print(f"  files run inside training_step: {len(result['training_step_files'])}")
    for f in result["training_step_files"]:
        print(f"    {f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
