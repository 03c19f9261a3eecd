"""``r3l show --html`` in a real browser: Debian's chromium, headless, driven over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: no port, no extra package). The test clicks the page's filter buttons and its
token-view box with real mouse events and reads what the page then shows.

`make test` installs chromium first (as root, with apt-get) where /usr/bin/chromium is missing; the tests skip only
where it can be neither found nor installed (not root), and fail where root could have installed it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import subprocess
import tempfile
from pathlib import Path

import pytest

from wrappers import RolloutConfig, save_jsonl
from wrappers.retry.reflect_retry import ReflectRetry, ReflectRetryConfig
from wrappers.retry.reflection import PolicyReflector
from wrappers.view.show import load_viewable
from wrappers.view.show_html import render_html

pytest.importorskip("transformers")

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # a container's /dev/shm is often too small for chromium
    "--remote-debugging-pipe",
]
REPLY_WAIT_S = 60  # a hang guard, not a timing assertion: a loaded machine answers in well under a second


class Browser:
    """A headless chromium and one page, spoken to with DevTools protocol messages on fds 3 and 4 (NUL-ended
    JSON, as ``--remote-debugging-pipe`` defines)."""

    def __init__(self, executable: str, workdir: Path):
        to_child, self._to_us = os.pipe(), os.pipe()
        self._log = workdir / "chromium-stderr.log"
        log = os.open(self._log, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)

        def child_fds() -> None:  # in the child: its fd 3 reads our messages, its fd 4 carries its answers
            read_end = fcntl.fcntl(to_child[0], fcntl.F_DUPFD_CLOEXEC, 10)
            write_end = fcntl.fcntl(self._to_us[1], fcntl.F_DUPFD_CLOEXEC, 10)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={workdir / 'profile'}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            close_fds=False,  # fds 3 and 4 must survive; every other fd of ours is close-on-exec
            preexec_fn=child_fds,
        )
        for fd in (log, to_child[0], self._to_us[1]):
            os.close(fd)
        self._out, self._in = to_child[1], self._to_us[0]
        self._buf, self._next_id, self.events = b"", 0, []
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.call("Page.enable", session=True)

    def _message(self) -> dict:
        while b"\0" not in self._buf:
            ready, _, _ = select.select([self._in], [], [], REPLY_WAIT_S)
            chunk = os.read(self._in, 1 << 16) if ready else b""
            if not chunk:
                tail = self._log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"chromium stopped answering (exit {self.proc.poll()}); its stderr ends:\n{tail}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: bool = False, **params) -> dict:
        """Send one command (to the page's session when ``session``) and return its result."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._message()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]
            self.events.append(answer)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event (the page's script has run by then)."""
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            self.events.append(self._message())

    def js(self, expression: str):
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real left click (mouse press and release) at the middle of the element ``selector`` names."""
        box = self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent", session=True, type=kind, x=box[0], y=box[1], button="left", clickCount=1
            )

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # it already went away: nothing left to close
            self.call("Browser.close")
        try:
            self.proc.wait(REPLY_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._out)
        os.close(self._in)


@pytest.fixture(scope="module")
def browser():
    if not os.access(CHROMIUM, os.X_OK):
        if os.geteuid() != 0:
            pytest.skip(f"no {CHROMIUM}, and not root to install it (as root: `make chromium` or `make test`)")
        pytest.fail(f"no {CHROMIUM} though running as root: run `make chromium` (`make test` does it first)")
    with tempfile.TemporaryDirectory(prefix="r3l-chromium-") as workdir:
        b = Browser(CHROMIUM, Path(workdir))
        try:
            yield b
        finally:
            b.close()


def scripted(replies):
    from r3l_learn.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(replies)


def walker(prompt_text):
    """Walks left unless the context carries the guidance to walk right."""
    return "<action>right</action>" if "walk right" in prompt_text else "<action>left</action>"


def diagnosis(suggestion):
    return json.dumps(
        {
            "trajectory_summary": "it walked",
            "root_cause_analysis": "the goal is to the right",
            "trajectory_outcome": "failure",
            "improvement_suggestion": suggestion,
            "retry_from_step": 1,
        }
    )


@pytest.fixture(scope="module")
def groups_file(tmp_path_factory):
    """Three real reflect-retry groups on the windy corridor (seeded): a retry that beats its lost base (guided to
    walk right), a lost group (guided the wrong way), and a group whose base already won."""
    config = ReflectRetryConfig(group_size=2, rollout=RolloutConfig(max_turns=8), fill=False)
    groups = []
    for task, policy, suggestion in (
        ("corridor-train-000000", scripted(walker), "walk right"),
        ("corridor-train-000001", scripted(walker), "walk left"),
        ("corridor-train-000002", scripted(["<action>right</action>"]), "walk right"),
    ):
        reflector = PolicyReflector(scripted([diagnosis(suggestion)]))
        rr = ReflectRetry("r3ltest/Corridor-v0", policy, reflector, config, env_kwargs={"length": 4})
        groups += rr.collect([task], seed=0)
    path = tmp_path_factory.mktemp("show") / "groups.jsonl"
    save_jsonl(path, groups)
    return path


def expected(groups):
    """What the page should say, counted here straight from the trajectories."""
    retries = [t for g in groups for t in g.trajectories if t.kind == "retry"]
    won = [i for i, g in enumerate(groups, start=1) if any(t.won for t in g.trajectories)]
    beat = [i for i, g in enumerate(groups, start=1) if any(t.metadata.get("beat_base") for t in g.trajectories)]
    return retries, won, beat


def test_the_page_sums_up_filters_by_outcome_and_folds(browser, groups_file, tmp_path):
    groups = load_viewable(groups_file)
    retries, won, beat = expected(groups)
    # the fixture covers every filter: a group that won with a retry beating its base, one that lost, one that won
    # without any retry beating its base
    assert len(groups) == 3 and beat and set(won) - set(beat) and set(range(1, 4)) - set(won)
    page = tmp_path / "page.html"
    page.write_text(render_html(groups), encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", page.read_text())  # offline: nothing fetched
    browser.open(page.as_uri())

    summary = browser.js(
        "Object.fromEntries([...document.querySelectorAll('#summary dd')].map(d => [d.dataset.key, d.textContent]))"
    )
    assert summary["groups"] == "3"
    assert summary["retries"] == str(len(retries))
    assert summary["retries_beat_base"] == str(sum(bool(r.metadata["beat_base"]) for r in retries))
    assert summary["mean_pivot"] == f"{sum(r.pivot for r in retries) / len(retries):.2f}"

    visible = "[...document.querySelectorAll('details.item')].filter(d => !d.hidden && d.offsetParent).map(d => d.id)"
    assert browser.js(visible) == ["item-1", "item-2", "item-3"]
    for name, ids in (("won", won), ("lost", sorted(set(range(1, 4)) - set(won))), ("beat", beat), ("all", [1, 2, 3])):
        browser.click(f"button[data-filter={name}]")
        assert browser.js(visible) == [f"item-{i}" for i in ids], name
        assert browser.js("document.getElementById('shown').textContent") == f"{len(ids)} of 3 shown"
        assert browser.js("document.querySelector('button.on').dataset.filter") == name

    browser.click("#collapse")
    assert browser.js("[...document.querySelectorAll('details.item')].map(d => d.open)") == [False] * 3
    browser.click("#expand")
    assert browser.js("[...document.querySelectorAll('details.item')].map(d => d.open)") == [True] * 3
    browser.click("#item-2 > summary")  # a group folds on its own summary line
    assert browser.js("[...document.querySelectorAll('details.item')].map(d => d.open)") == [True, False, True]


def test_the_token_view_colours_trainable_masked_and_context_tokens(browser, groups_file, tmp_path):
    from r3l_learn.policies.models import tiny_tokenizer

    groups = load_viewable(groups_file)
    page = tmp_path / "page.html"
    page.write_text(render_html(groups, decode=tiny_tokenizer().decode), encoding="utf-8")
    browser.open(page.as_uri())

    shown = "getComputedStyle(document.querySelector('.tokview')).display"
    assert browser.js(shown) == "none"  # off until ticked
    browser.click("#tokens")
    assert browser.js("document.getElementById('tokens').checked") is True
    assert browser.js(shown) == "block"

    counts = browser.js(
        "Object.fromEntries([...document.querySelectorAll('.tokview')].map(v => [v.dataset.traj, Object.fromEntries("
        "['tk-train', 'tk-masked', 'tk-ctx', 'tk-odd'].map(c => [c, [...v.querySelectorAll('span.' + c)]"
        ".reduce((n, s) => n + Number(s.dataset.n), 0)]))]))"
    )
    trajectories = [t for g in groups for t in g.trajectories]
    assert sorted(counts) == sorted(t.id for t in trajectories)
    for t in trajectories:
        agent, trained = sum(t.agent_mask), sum(t.loss_mask)
        assert counts[t.id] == {
            "tk-train": trained,
            "tk-masked": agent - trained,
            "tk-ctx": len(t.token_ids) - agent,
            "tk-odd": 0,
        }
    # a retry's turns before its pivot are masked (pivotal credit), so the view shows masked tokens at all
    assert any(c["tk-masked"] for c in counts.values())
    # decoded: the agent's reply reads as text in a trainable run
    assert browser.js("[...document.querySelectorAll('span.tk-train')].some(s => s.textContent.includes('<action>'))")
    browser.click("#tokens")
    assert browser.js(shown) == "none"


def test_chromium_is_what_make_test_installs():
    """The Makefile's test target installs chromium first, so CI (root, no chromium) runs the tests above."""
    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    test_line = next(line for line in makefile.splitlines() if line.startswith("test:"))
    assert "chromium" in test_line.split(":", 1)[1].split()
    assert re.search(r"^chromium:", makefile, re.M) and "apt-get" in makefile.split("\nchromium:", 1)[1]
