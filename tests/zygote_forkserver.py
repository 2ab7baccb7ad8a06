"""In a gateway forked from the test run's zygote (``tests/zygote.py``): its compression pool's fork
server comes from the zygote too, which has imported and loaded what the server preloads (MixPR,
scikit-learn, the tokenizers' tables: ``gateway.compress.preload``). A new interpreter spent about 1.5
CPU-seconds on that for every gateway a test started (issue 59).

``multiprocessing``'s fork server is one object per process (``multiprocessing.forkserver``); this one
differs from it only in where the server process comes from: the same listening socket and "alive"
pipe, made here, go to the zygote, which forks the server with this process's environment, folder,
stdout and stderr. Workers are still forked by that server, and it still exits when this process
closes the pipe (a gateway killed takes its fork server and, through their pipes, its workers along).
The server is the zygote's child, not this process's: whether it still runs is the zygote's to say.
"""

from __future__ import annotations

import os
import socket
from multiprocessing import connection, forkserver, resource_tracker, util

from tests.zygote import ask


class ZygoteForkServer(forkserver.ForkServer):
    def __init__(self, zygote: str) -> None:
        super().__init__()
        self._zygote = zygote

    def ensure_running(self) -> None:
        """As ``ForkServer.ensure_running``, but the server forked by the zygote."""
        with self._lock:
            resource_tracker.ensure_running()
            if self._forkserver_pid is not None:
                if ask(self._zygote, {"op": "poll", "pid": self._forkserver_pid})["returncode"] is None:
                    return
                os.close(self._forkserver_alive_fd)
                self._forkserver_address = self._forkserver_alive_fd = self._forkserver_pid = None
            with socket.socket(socket.AF_UNIX) as listener:
                address = connection.arbitrary_address("AF_UNIX")
                listener.bind(address)
                if not util.is_abstract_socket_namespace(address):
                    os.chmod(address, 0o600)
                listener.listen()
                alive_r, alive_w = os.pipe()  # every client holds the write end; the server, the read end
                try:
                    request = {"op": "forkserver", "preload": self._preload_modules, "cwd": os.getcwd(),
                               "env": dict(os.environ)}
                    pid = ask(self._zygote, request, [listener.fileno(), alive_r, 1, 2])["pid"]
                except BaseException:
                    os.close(alive_w)
                    raise
                finally:
                    os.close(alive_r)
                self._forkserver_address = address
                self._forkserver_alive_fd = alive_w
                self._forkserver_pid = pid


def use(zygote: str) -> None:
    """This process's fork server, from now on, is forked by the zygote at socket ``zygote``."""
    server = ZygoteForkServer(zygote)
    forkserver._forkserver = server
    forkserver.ensure_running = server.ensure_running
    forkserver.get_inherited_fds = server.get_inherited_fds
    forkserver.connect_to_new_process = server.connect_to_new_process
    forkserver.set_forkserver_preload = server.set_forkserver_preload
