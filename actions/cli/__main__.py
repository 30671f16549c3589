"""`python -m nodeconsole.actions.cli`: every nodeconsole subcommand, headless (the interactive console
is `python -m nodeconsole.screens.launch`, the installed `nodeconsole` command)."""
import sys

if __name__ == "__main__":
    from nodeconsole.actions.cli import main

    sys.exit(main())
