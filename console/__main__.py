"""`python -m nodeconsole.console` runs the nodeconsole command."""
import sys

if __name__ == "__main__":
    from nodeconsole.console.cli import main

    sys.exit(main())
