"""`python -m nodeconsole.console` runs the nodeconsole subcommands (the interactive console is
`python -m nodeconsole.screens.launch`, the installed `nodeconsole` command)."""
import sys

if __name__ == "__main__":
    from nodeconsole.console.cli import main

    sys.exit(main())
