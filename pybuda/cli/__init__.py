"""The ``pybuda`` command line: ``pybuda run | compile | benchmark`` (``python -m pybuda.cli``).

:mod:`~pybuda.cli.main` parses the command and dispatches; each subcommand is its own module
(:mod:`~pybuda.cli.run`, :mod:`~pybuda.cli.compile`, :mod:`~pybuda.cli.benchmark`).
"""

