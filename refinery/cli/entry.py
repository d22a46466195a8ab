"""The ``refinery`` console script: until the command starts, Ctrl-C or SIGTERM end it at once in one line
(nothing has been written yet; Python would print the traceback of whichever import it cut short), then the
command line itself (``main.run``), whose interrupts clean up and name what was published."""
import os
import signal


def _ended_before_start(signum, frame):
    said = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
    os.write(2, f"{said}: nothing was published; a finished output in --out is as it was\n".encode())
    os._exit(130 if signum == signal.SIGINT else 143)


def end_before_start() -> None:
    """Until ``started``, Ctrl-C and SIGTERM end the process at once, in one line."""
    signal.signal(signal.SIGINT, _ended_before_start)
    signal.signal(signal.SIGTERM, _ended_before_start)


def started() -> None:
    """The command runs: Ctrl-C raises ``KeyboardInterrupt`` again, recorded so that it ends the command as an
    interrupt whatever it became (``termination.end_on_interrupt``; SIGTERM: ``termination.end_on_sigterm``)."""
    from refinery.termination import end_on_interrupt

    end_on_interrupt()


def run() -> None:
    end_before_start()
    from refinery.cli.main import run as command_line

    started()
    command_line()   # main() puts refinery's SIGTERM handler in place
