"""A TCP relay on loopback that a test can cut (standard library only).

Relay(target_port) listens on 127.0.0.1:<port> and pipes every connection to the target. cut()
closes every open connection and refuses new ones (accepts and closes them at once) until
restore(): what the target sent meanwhile is lost, as a network partition loses it. hold() keeps
the connections open but delivers nothing until release(), which delivers everything held, in
order: a slow network, or events still in flight. Used to drop a
KV-event subscription between ramjet and a real vLLM publisher (ZeroMQ reconnects by itself; the
batches published while it was cut never reach the subscriber, so it must replay them).
"""

from __future__ import annotations

import socket
import threading


class Relay:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list = []
        self._cut = False
        self._stopped = False
        self._flowing = threading.Event()
        self._flowing.set()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                refuse = self._cut
            if refuse:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open += [client, upstream]
                self.connections += 1
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            doomed, self._open = self._open, []
        for s in doomed:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def hold(self) -> None:
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def stop(self) -> None:
        self._stopped = True
        self._flowing.set()
        self.cut()
        self.listener.close()
