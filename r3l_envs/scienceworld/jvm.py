"""One private ScienceWorld JVM per env: started on first use, checked for readiness, never leaked.

Upstream's ``ScienceWorldEnv`` starts its JVM in the constructor, adds a Python callback server nobody needs,
and relies on ``__del__`` to stop it. :class:`ScienceWorldJVM` owns the process instead:

* **Start**: ``java -cp <py4j jar>:<scienceworld.jar>[:<step helper>] py4j.GatewayServer --die-on-broken-pipe 0``.
  The server prints its (ephemeral) port on stdout when it listens; we wait for that line with a deadline
  (``select``, no sleeps), then connect and make one real call before declaring the JVM ready.
* **No leaks**: ``close()``, garbage collection and interpreter exit all run the same finalizer
  (:func:`weakref.finalize`), which closes the gateway and the JVM's stdin, then terminates and kills the
  process if it has not exited. If Python itself is killed, the JVM sees its stdin close
  (``--die-on-broken-pipe``) and exits on its own.
* **Death**: a call to a JVM that died (killed, OOM) raises :class:`~r3l_envs.errors.EngineError` and marks
  the JVM dead; the env restarts it on the next ``reset()``/``restore()``.
* **Isolation**: each instance has its own process, port and gateway client; nothing is shared.

The JVM may print on stdout; a daemon thread drains it (dropping the text) so its pipe never fills and blocks
the engine, and another keeps the last lines of stderr for error messages.

**Steps** go through a small Java helper, :data:`STEP_HELPER_SOURCE`, compiled with ``javac`` against the
engine's jar on first use and cached under :func:`r3l_envs.cache.cache_root` (see :func:`step_helper_dir`).
Upstream's ``PythonInterface.step`` plays the action, then does work nobody reads: a "look around" and an
inventory for its run history, the list of every object referent in view, and three debug prints that the
drain thread then has to read (with ``getScore``/``getCompleted`` after it, about a sixth of the CPU time of a
warm step, JVM and Python together; see ``benchmarks/sciworld.py``). The helper calls the same engine step
(``AgentInterface.step``), stores the score and completion flag exactly as ``PythonInterface.step`` does, and
returns the observation with them in one round trip. The action history upstream keeps for
``getActionHistory``/``getRunHistoryJSON`` is not recorded (r3l keeps its own). Where ``javac`` is missing (a
JRE without a JDK) or fails, a warning is logged once and steps go through ``PythonInterface.step`` as before;
both paths give identical observations, scores and engine states.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import logging
import os
import selectors
import shutil
import subprocess
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from r3l_envs.cache import build_dir_once, cache_root
from r3l_envs.errors import EngineError

__all__ = ["STEP_HELPER_SOURCE", "ScienceWorldJVM", "step_helper_dir"]

logger = logging.getLogger(__name__)

_JAVA_HINT = "Install Java 17 (Debian/Ubuntu: apt-get install -y default-jre-headless) or set JAVA_HOME."


def _java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return os.path.join(java_home, "bin", "java")
    java = shutil.which("java")
    if java is None:
        raise EngineError(f"ScienceWorld needs a Java runtime and none was found on PATH. {_JAVA_HINT}")
    return java


#: ``PythonInterface.step`` minus its run history and debug output, plus the score and completion flag.
#: Special inputs (``help``, ``objects``, ``task``) and error states go through ``PythonInterface.step`` itself.
STEP_HELPER_SOURCE = """\
package r3l;

import scala.Tuple3;
import scienceworld.runtime.pythonapi.PythonInterface;

/** One ScienceWorld step in one call: "score TAB completed TAB observation". */
public final class StepHelper {
    /** PythonInterface.step's answer when the engine returns no text (its trailing space included). */
    static final String UNKNOWN_ACTION =
        "Unknown action.  Type 'help' for a list of actions, and 'objects' for a list of possible object referents. ";

    private StepHelper() {}

    public static String step(PythonInterface engine, String input) {
        String command = input.trim().toLowerCase();
        String observation;
        if (command.equals("help") || command.equals("objects") || command.equals("task")
                || !"".equals(engine.errorStr()) || engine.errorUnknownEnvironment()
                || engine.agentInterface().isEmpty() || engine.agent().isEmpty()
                || engine.agent().get().getContainer().isEmpty()) {
            observation = engine.step(input);
        } else {
            Tuple3<String, Object, Object> result = engine.agentInterface().get().step(input);
            engine.score_$eq((Double) result._2());
            engine.isComplete_$eq((Boolean) result._3());
            observation = result._1().isEmpty() ? UNKNOWN_ACTION : result._1();
        }
        return engine.score() + "\\t" + engine.isComplete() + "\\t" + observation;
    }
}
"""
_STEP_HELPER_CLASS = "r3l.StepHelper"


def _javac() -> str | None:
    """The ``javac`` of the JDK whose ``java`` runs the engine (else any on PATH), or ``None``."""
    candidates = []
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidates.append(os.path.join(java_home, "bin", "javac"))
    java = shutil.which("java")
    if java:
        candidates.append(os.path.join(os.path.dirname(os.path.realpath(java)), "javac"))
    candidates.append(shutil.which("javac") or "")
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


@functools.cache
def step_helper_dir() -> Path | None:
    """Classpath folder of the compiled step helper, built once per machine; ``None`` if it cannot be built.

    The cache entry is keyed by the helper's source and the engine jar's content, compiled for Java 8 bytecode
    (``--release 8``) so any JVM the engine runs on loads it. A failure is logged once per process.
    """
    from scienceworld.constants import JAR_PATH

    javac = _javac()
    if javac is None:
        logger.warning(
            "javac not found (a JRE without a JDK): ScienceWorld steps use the engine's slower "
            "PythonInterface.step. Install a JDK (apt-get install -y default-jdk-headless) for faster steps."
        )
        return None
    digest = hashlib.sha256(STEP_HELPER_SOURCE.encode())
    with open(JAR_PATH, "rb") as jar:
        for block in iter(lambda: jar.read(1 << 20), b""):
            digest.update(block)

    def build(folder: Path) -> None:
        source = folder / "r3l" / "StepHelper.java"
        source.parent.mkdir()
        source.write_text(STEP_HELPER_SOURCE)
        command = [javac, "--release", "8", "-nowarn", "-cp", JAR_PATH, "-d", str(folder), str(source)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise EngineError(f"javac exited with {done.returncode}: {(done.stderr or done.stdout)[-1000:]}")

    try:
        return build_dir_once(cache_root() / "scienceworld" / f"step-helper-{digest.hexdigest()[:16]}", build)
    except (OSError, subprocess.SubprocessError, EngineError) as exc:
        logger.warning("could not build the ScienceWorld step helper (%s): steps use PythonInterface.step", exc)
        return None


def _drain(stream: Any, keep: collections.deque | None) -> None:
    """Read a pipe until EOF so the JVM never blocks on a full pipe; keep the tail if asked."""
    try:
        for line in iter(stream.readline, b""):
            if keep is not None:
                keep.append(line.decode("utf-8", "replace").rstrip())
    except (OSError, ValueError):  # the pipe was closed under us by the finalizer: nothing left to read
        pass


def _terminate(proc: subprocess.Popen, gateway: Any) -> None:
    """Stop one JVM for good (the finalizer: must not reference the owning object)."""
    if gateway is not None:
        _disconnect(gateway)
    try:
        if proc.stdin is not None:
            proc.stdin.close()  # --die-on-broken-pipe: the JVM exits when its stdin closes
    except OSError:
        pass
    for stop, wait_s in ((None, 2.0), (proc.terminate, 2.0), (proc.kill, 5.0)):
        if stop is not None:
            with contextlib.suppress(ProcessLookupError):
                stop()
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def _disconnect(gateway: Any) -> None:
    """Close the gateway's sockets and stop py4j from contacting the JVM again.

    py4j tells the JVM when a Java object proxy is garbage-collected; once the JVM is gone every such message
    would log a connection error, so the client is marked disconnected first.
    """
    gateway._gateway_client.is_connected = False
    try:
        gateway.close(keep_callback_server=False, close_callback_server_connections=False)
    except Exception:  # best effort: the process is stopped by the caller regardless
        logger.debug("closing the py4j gateway failed", exc_info=True)


class ScienceWorldJVM:
    """A ScienceWorld server in its own JVM, reached through py4j.

    Args:
        start_timeout: seconds to wait for the JVM to listen and answer its first call.
        call_timeout: seconds one call may take before the JVM is declared hung (and killed).
        java_options: extra JVM options (e.g. ``("-Xmx1g",)``).
        step_helper: play steps through the compiled helper (see the module docstring) when it can be built;
            ``False`` always uses ``PythonInterface.step`` (the two give identical results).
    """

    def __init__(
        self,
        *,
        start_timeout: float = 60.0,
        call_timeout: float = 300.0,
        java_options: tuple = (),
        step_helper: bool = True,
    ):
        self.start_timeout = float(start_timeout)
        self.call_timeout = float(call_timeout)
        self.java_options = tuple(java_options)
        self.step_helper = bool(step_helper)
        self._helper_dir: Path | None = None
        self._helper_step: Any = None
        self._proc: subprocess.Popen | None = None
        self._gateway: Any = None
        self._interface: Any = None
        self._finalizer: weakref.finalize | None = None
        self._stderr_tail: collections.deque = collections.deque(maxlen=20)
        self._random: Any = None
        self._random_fields: dict[str, Any] = {}
        self.dead = False
        self.start_seconds: float | None = None
        self.engine_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def pid(self) -> int | None:
        """Process id of the running JVM, or ``None`` before start / after close."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True when the JVM was started, is not known to be dead, and its process is alive."""
        return self._proc is not None and not self.dead and self._proc.poll() is None

    def start(self) -> None:
        """Launch the JVM and wait (with ``start_timeout``) until it answers; idempotent while running."""
        if self.running:
            return
        self.close()  # a dead or half-started JVM is cleaned up before a new one starts
        from py4j.java_gateway import GatewayParameters, JavaGateway, find_jar_path
        from scienceworld.constants import BASEPATH, JAR_PATH

        self._helper_dir = step_helper_dir() if self.step_helper else None
        t0 = time.perf_counter()
        classpath = [find_jar_path(), JAR_PATH, *([str(self._helper_dir)] if self._helper_dir else [])]
        command = [
            _java_executable(),
            *self.java_options,
            "--add-opens",  # lets call_preserving_random() read java.util.Random's private state
            "java.base/java.util=ALL-UNNAMED",
            "-cp",
            os.pathsep.join(classpath),
            "py4j.GatewayServer",
            "--die-on-broken-pipe",
            "0",  # ephemeral port: parallel envs never collide
        ]
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=BASEPATH
        )
        self._proc, self.dead = proc, False
        self._stderr_tail.clear()
        self._finalizer = weakref.finalize(self, _terminate, proc, None)
        port = self._read_port(proc, t0 + self.start_timeout)
        threading.Thread(target=_drain, args=(proc.stdout, None), daemon=True, name="sw-jvm-stdout").start()
        threading.Thread(
            target=_drain, args=(proc.stderr, self._stderr_tail), daemon=True, name="sw-jvm-stderr"
        ).start()
        try:
            gateway = JavaGateway(
                gateway_parameters=GatewayParameters(
                    port=port, auto_field=True, read_timeout=self.call_timeout, auto_close=True
                ),
                java_process=proc,
            )
        except Exception as exc:
            self.close()
            raise EngineError(f"could not connect to the ScienceWorld JVM on port {port}: {exc}") from exc
        self._finalizer.detach()
        self._gateway = gateway
        self._finalizer = weakref.finalize(self, _terminate, proc, gateway)
        self.call_jvm(lambda jvm: jvm.java.lang.System.getProperty("java.version"))  # readiness: a round trip
        self.start_seconds = time.perf_counter() - t0
        logger.info("ScienceWorld JVM pid %d ready on port %d in %.2f s", proc.pid, port, self.start_seconds)

    def _engine(self) -> Any:
        """ScienceWorld's ``PythonInterface``, created on first use (loading the engine's classes takes ~1–2 s)."""
        if self._interface is None:
            t0 = time.perf_counter()
            self._interface = self.call_jvm(lambda jvm: jvm.scienceworld.runtime.pythonapi.PythonInterface())
            self._random = self.call_jvm(lambda jvm: getattr(getattr(jvm.scala.util, "Random$"), "MODULE$").self())
            fields = self.call_jvm(lambda jvm: jvm.java.lang.Class.forName("java.util.Random").getDeclaredFields())
            self._random_fields = {str(f.getName()): f for f in fields}
            for field in self._random_fields.values():
                field.setAccessible(True)
            if self._helper_dir is not None:
                self._helper_step = self.call_jvm(self._find_helper, what="loading the step helper")
            self.engine_seconds = time.perf_counter() - t0
        return self._interface

    def _find_helper(self, jvm: Any) -> Any:
        """The helper's static ``step`` (a py4j member, fetched once: each lookup is a round trip), or ``None``."""
        from py4j.java_gateway import JavaClass

        helper = jvm
        for name in _STEP_HELPER_CLASS.split("."):
            helper = getattr(helper, name)
        if not isinstance(helper, JavaClass):  # py4j answers a package for a name it cannot load
            logger.warning(
                "the JVM did not load %s from %s: steps use PythonInterface.step", _STEP_HELPER_CLASS, self._helper_dir
            )
            return None
        return helper.step

    def _read_port(self, proc: subprocess.Popen, deadline: float) -> int:
        """Wait for the port line the gateway prints once it listens (or for the JVM to fail)."""
        assert proc.stdout is not None
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buffer:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    self.close()
                    raise EngineError(
                        f"the ScienceWorld JVM did not start within {self.start_timeout:.0f} s; the machine may be "
                        "overloaded: pass a larger start_timeout to gym.make"
                    )
                if not selector.select(timeout=remaining):
                    continue
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:  # EOF: the JVM exited before listening
                    code = proc.wait()
                    stderr = proc.stderr.read().decode("utf-8", "replace")[-2000:] if proc.stderr else ""
                    self.close()
                    raise EngineError(f"the ScienceWorld JVM exited with code {code} before starting: {stderr}")
                buffer += chunk
        line = buffer.split(b"\n", 1)[0].strip()
        try:
            return int(line)
        except ValueError:
            self.close()
            raise EngineError(f"unexpected first line from the py4j gateway: {line[:200]!r}") from None

    def close(self) -> None:
        """Stop the JVM (idempotent). The object can be started again afterwards."""
        if self._finalizer is not None:
            self._finalizer()  # runs _terminate once, then detaches
        self._finalizer = None
        self._proc = self._gateway = self._interface = self._random = self._helper_step = None
        self._random_fields = {}

    def kill(self) -> None:
        """Kill the JVM process abruptly, as an OOM killer would (for tests and fault injection)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    # ------------------------------------------------------------------ calls
    def call(self, method: str, *args: Any) -> Any:
        """Call ``PythonInterface.<method>(*args)`` in the JVM; raises :class:`EngineError` if the JVM is gone."""
        engine = self._engine()
        return self.call_jvm(lambda _jvm: getattr(engine, method)(*args), what=method)

    @property
    def uses_step_helper(self) -> bool:
        """True when steps go through the compiled helper (known once the engine is loaded)."""
        return self._helper_step is not None

    def step(self, action: str) -> tuple[str, float, bool]:
        """Play one action: the engine's observation, its score (-1 to 1) and its "task completed" flag."""
        engine = self._engine()
        helper = self._helper_step
        if helper is not None:
            answer = self.call_jvm(lambda _jvm: helper(engine, action), what="step")
            score, completed, observation = str(answer).split("\t", 2)
            return observation, float(score), completed == "true"
        observation = str(self.call_jvm(lambda _jvm: engine.step(action), what="step"))
        return observation, float(self.call("getScore")), bool(self.call("getCompleted"))

    def call_preserving_random(self, method: str, *args: Any) -> list[str]:
        """Call a method returning a list of strings, leaving the engine's global random generator as it was.

        ScienceWorld's valid-action enumeration draws from ``scala.util.Random``, the generator the world
        itself uses; calling it would change the rest of the episode and make replay (which does not
        enumerate) diverge. Its state (a 48-bit seed plus a cached Gaussian) is saved and put back.
        """
        engine = self._engine()
        fields = self._random_fields
        rnd = self._random
        seed, cached, gaussian = self.call_jvm(
            lambda _jvm: (
                fields["seed"].get(rnd),
                fields["haveNextNextGaussian"].getBoolean(rnd),
                fields["nextNextGaussian"].getDouble(rnd),
            ),
            what="saving the random state",
        )
        result = self.call_jvm(
            # one round trip for the whole list: iterating a Java list through py4j costs one per element
            lambda jvm: jvm.java.lang.String.join("\n", getattr(engine, method)(*args)),
            what=method,
        )

        def put_back(_jvm: Any) -> None:
            rnd.setSeed(int(seed) ^ 0x5DEECE66D)  # setSeed scrambles with this multiplier: undo it
            fields["nextNextGaussian"].setDouble(rnd, gaussian)
            fields["haveNextNextGaussian"].setBoolean(rnd, cached)

        self.call_jvm(put_back, what="restoring the random state")
        return str(result).split("\n") if result else []

    def call_jvm(self, fn: Any, what: str = "call") -> Any:
        if self.dead or self._proc is None:
            raise EngineError(self._dead_message())
        from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

        try:
            return fn(self._gateway.jvm)
        except Py4JJavaError as exc:  # the engine threw: the JVM is fine, the call was not
            raise EngineError(f"ScienceWorld raised in {what}: {exc.java_exception}") from exc
        except (Py4JNetworkError, Py4JError, OSError) as exc:
            self.dead = True
            _disconnect(self._gateway)
            if self._proc.poll() is None:  # hung rather than dead: it cannot be trusted any more
                self._proc.kill()
                self._proc.wait()
            raise EngineError(self._dead_message()) from exc

    def _dead_message(self) -> str:
        if self._proc is None:
            return "the ScienceWorld JVM is not running (closed or never started); call reset() to start it"
        tail = " | ".join(self._stderr_tail)
        return (
            f"the ScienceWorld JVM (pid {self._proc.pid}) died or stopped answering (exit code "
            f"{self._proc.poll()}{'; stderr: ' + tail[-500:] if tail else ''}). Call reset() to start a new "
            "episode, or r3l_envs.restore(env, checkpoint) to restart it and replay the episode."
        )
