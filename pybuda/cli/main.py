"""The ``pybuda`` command: ``pybuda run | compile | benchmark | image``.

Each subcommand lives in its own module (loaded only when used) and exposes ``add_arguments(parser)``
and ``main(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import List, Optional

SUBCOMMANDS = {
    "run": ("pybuda.cli.run", "compile a real model for a Wormhole n150 and run it on the simulated chip"),
    "compile": ("pybuda.cli.compile", "compile a model from pybuda.models into a netlist"),
    "benchmark": ("pybuda.cli.benchmark", "measure host throughput and model card throughput"),
    "image": ("pybuda.cli.image", "inspect (info) or run a device image (.tti)"),
}


def main(argv: Optional[List[str]] = None) -> int:
    from pybuda.config import read_env

    logging.basicConfig(level=read_env().log_level.upper(),
                        format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(prog="pybuda", description="TT-Buda on a simulated Tenstorrent chip")
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        try:
            modules[name] = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name != module_name:
                raise
            continue
        modules[name].add_arguments(p)
    args = parser.parse_args(argv)
    if args.command not in modules:
        parser.error(f"'{args.command}' is not available in this build")
    from pybuda.errors import PybudaError

    try:
        return int(modules[args.command].main(args) or 0)
    except PybudaError as e:
        print(f"pybuda {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
