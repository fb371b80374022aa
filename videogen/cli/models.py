"""`videogen models`: the model presets and whether each one's weights are present."""

from __future__ import annotations

import argparse
import json


def add_models_parser(sub: argparse._SubParsersAction) -> None:
    """Register `videogen models`."""
    m = sub.add_parser("models", help="list model presets and whether each one's weights are present")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_models)


def cmd_models(args: argparse.Namespace) -> int:
    """Print the presets as a table, or as JSON with --json."""
    from videogen.config.presets import default_preset_name, load_presets

    presets = load_presets()
    default = default_preset_name()
    if args.json:
        print(json.dumps([{"name": p.name, "kind": p.kind, "available": p.available, "path": str(p.path) if p.path else None,
                           "size": f"{p.size[0]}x{p.size[1]}", "fps": p.fps, "default": p.name == default}
                          for p in presets.values()]))  # fmt: skip
        return 0
    print(f"{'preset':<22} {'present':<8} {'size':<10} {'fps':>4}  where")
    for p in presets.values():
        where = "built in" if p.kind == "builtin" else str(p.path)
        mark = "*" if p.name == default else " "
        size = f"{p.size[0]}x{p.size[1]}"
        print(f"{mark}{p.name:<21} {'yes' if p.available else 'no':<8} {size:<10} {p.fps:>4g}  {where}")
    return 0
