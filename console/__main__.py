"""`python -m console` runs the nodeconsole command."""
import sys

if __name__ == "__main__":
    from console.cli import main

    sys.exit(main())
