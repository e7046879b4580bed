"""The notebooks' Jupyter kernel on a machine that opens no internet socket (the lent TPU machine).

There, creating a TCP socket fails with "Address family not supported by protocol", even on the loopback,
and libzmq does not raise on it: it aborts the process (``src/ip_resolver.cpp``). The kernel talks to its
client over unix sockets (the connection file asks for ``ipc``: ``JAXMAGIC_KERNEL_TRANSPORT=ipc``), but
ipykernel's IOPub thread also binds ``tcp://127.0.0.1`` for a pipe that forwards the output of forked child
processes - with no way to ask it not to. This launcher turns that pipe off (output printed by a forked
child is then not shown; the demo notebooks print none) and starts the kernel as
``python -m ipykernel_launcher`` does. ``tools/accelerator/device.sh`` writes the kernelspec that runs it.
"""

from ipykernel import iostream
from ipykernel.kernelapp import launch_new_instance


def _no_pipe(self: iostream.IOPubThread) -> None:
    self._pipe_flag = False  # as ipykernel does when the bind fails with an error it can catch


iostream.IOPubThread._setup_pipe_in = _no_pipe  # type: ignore[method-assign]

if __name__ == "__main__":
    launch_new_instance()
