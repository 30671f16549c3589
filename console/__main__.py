"""`python -m console` runs the nodeconsole command."""
import sys

from console.cli import main

sys.exit(main())
