from ttball.cli import entry

entry()
