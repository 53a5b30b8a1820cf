"""A server process the benchmarks start and read the port of: its stderr is JSON log lines, one
of which (msg == the given text) carries "port". Standard library only."""
import json
import subprocess
import threading


class LogProc:
    """Starts argv with env; waits up to `wait` s for the log line whose msg is `msg` and keeps
    its port in .port; a thread keeps stderr flowing (logging never blocks) and the last 20
    lines for an error message. Raises RuntimeError naming `what` when no such line comes."""

    def __init__(self, argv, env, msg, what, wait=10):
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=env)
        self.port = None
        self.tail = []
        found = threading.Event()

        def drain():
            for line in self.proc.stderr:
                self.tail = (self.tail + [line])[-20:]
                if self.port is None:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(rec, dict) and rec.get("msg") == msg and rec.get("port"):
                        self.port = rec["port"]
                        found.set()
            found.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        if not found.wait(wait) or not self.port:
            self.stop()
            raise RuntimeError("%s did not log its port: %s"
                               % (what, b"".join(self.tail).decode(errors="replace")[-1000:]))

    def stop(self, timeout=5):
        """Terminates the process (killed after timeout s) and closes its stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(timeout=5)
        self.proc.stderr.close()
