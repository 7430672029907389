"""The ``choicewise`` command (``[project.scripts]``): the same command as ``cargo install``'s
binary, run in this process by the extension module."""

import signal
import sys

from . import _choicewise


def main() -> None:
    """Runs the command with ``sys.argv`` and exits with its status."""
    # Ctrl-C: the command reads it where it has something to do about it (printing what a
    # --json run assembled, say); elsewhere it ends the process, as it does the binary,
    # rather than waiting for Python to raise KeyboardInterrupt after the command returns.
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    except ValueError:  # not the main thread
        pass
    sys.stdout.flush()
    sys.exit(_choicewise.run_cli(list(sys.argv)))


if __name__ == "__main__":
    main()
