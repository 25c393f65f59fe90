"""``python -m pybuda.cli``: the ``pybuda`` command."""

import sys

from pybuda.cli.main import main

sys.exit(main())
