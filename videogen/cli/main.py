"""The `videogen` command: builds the parser from the command modules and turns errors into exit codes.

Bad input gets one line, `videogen: error: --option=value: reason`, and exit status 2; nothing
is left half-written.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

from videogen.cli.drift import add_drift_parser
from videogen.cli.eval import add_eval_parser
from videogen.cli.models import add_models_parser
from videogen.cli.options import EXIT_BAD_INPUT, CliParser, UsageError, option_name
from videogen.cli.render import add_render_parser
from videogen.cli.stream import add_stream_parser
from videogen.cli.train import add_train_parser
from videogen.errors import InvalidOption, ModelLoadError, NonFiniteLatents
from videogen.io.video import VideoIOError


def build_parser() -> argparse.ArgumentParser:
    """The whole `videogen` parser: the library's commands, then those plugins register."""
    parser = CliParser(prog="videogen", description="Long-form video generation with open diffusion transformers.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CliParser)
    add_render_parser(sub)
    add_models_parser(sub)
    add_train_parser(sub)
    add_eval_parser(sub)
    add_drift_parser(sub)
    add_stream_parser(sub)
    # `serve` and `worker` live with the service (workers/, api/): the library does not import
    # them; they register through the `videogen.commands` entry-point group (pyproject.toml).
    for ep in entry_points(group="videogen.commands"):
        try:
            add = ep.load()
        except (ImportError, AttributeError):  # a plugin whose extra is not installed offers no commands
            continue
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one `videogen` command; returns its exit status (2 for bad input)."""
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except InvalidOption as exc:
        print(f"videogen: error: {option_name(exc.option)}={exc.value}: {exc.reason}", file=sys.stderr)
    except (UsageError, ModelLoadError, VideoIOError, ValueError) as exc:
        print(f"videogen: error: {exc}", file=sys.stderr)
    except NonFiniteLatents as exc:
        print(f"videogen: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("videogen: interrupted", file=sys.stderr)
        return 130
    return EXIT_BAD_INPUT
