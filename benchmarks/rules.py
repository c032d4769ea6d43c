"""Reading the results a device script's decision rule is applied to."""

import json
import sys


def load_reps(paths, key="rows"):
    """The timing rows of each repeat's JSON file (``key`` of each; None: the
    whole file); exits with a message naming the file when one is missing or
    unreadable (a run cut short), so that no rule is applied to half the data."""
    reps = []
    for path in paths:
        try:
            data = json.load(open(path))
        except (OSError, ValueError) as exc:
            sys.exit(f"no timing in {path}: {exc}")
        reps.append(data if key is None else data[key])
    return reps
