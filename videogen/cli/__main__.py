"""`python -m videogen.cli`: the `videogen` command."""

import sys

from videogen.cli import main

sys.exit(main())
