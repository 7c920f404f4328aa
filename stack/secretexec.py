"""Start a program with secrets from files in its environment:

    python -m stack.secretexec VAR=/path/to/file [VAR=FILE ...] -- PROGRAM ARGS...

Reads each file (whitespace stripped) into ``VAR`` and replaces itself with the program
(``os.execvpe``, same PID: supervisord's signals reach the program itself). The local stack
starts every program that needs a key this way, so keys are in no command line and in no
config file (stack/secrets.py). Exit 2 with the variable and the file named when a file
cannot be read.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.stderr.write("usage: python -m stack.secretexec VAR=FILE ... -- PROGRAM ARGS...\n")
        return 2
    split = argv.index("--")
    env = dict(os.environ)
    for pair in argv[:split]:
        var, sep, path = pair.partition("=")
        if not sep or not var:
            sys.stderr.write(f"secretexec: {pair!r} is not VAR=FILE\n")
            return 2
        try:
            with open(path) as f:
                env[var] = f.read().strip()
        except OSError as exc:
            sys.stderr.write(f"secretexec: cannot read the secret for {var} from {path}: "
                             f"{exc.strerror}; run `splitstack down && splitstack up` to recreate it\n")
            return 2
    program = argv[split + 1:]
    os.execvpe(program[0], program, env)
    return 0  # pragma: no cover - execvpe does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
