"""``python -m splitstack``: the same as the `splitstack` command."""

from splitstack.cli.main import main

main()
