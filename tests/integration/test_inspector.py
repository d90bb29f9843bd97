"""The inspector (/ui) in a real browser (Debian's chromium driven by Playwright) against the real
gateway, broker, worker and embedded store: sign in with a key, the conversations, a card lighting
up its turns, a question finding its gold turn, turns streaming in, a second tenant seeing nothing,
a turn holding markup shown as text, CSRF and the session cookie, forgetting a speaker.

With MEMSTREAM_SCREENSHOTS=<folder> each page is saved there (docs/inspector.md's images)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from memstream.client import MemoryClient
from memstream.datasets import demo_conversation_path, load_locomo, locomo_turns
from memstream.schemas import ImportProgress, LlmUsage, Turn
from memstream.schemas.topics import Topic

from .conftest import Pipeline

pytestmark = pytest.mark.integration

KEYS = {"acme": "key-of-acme-for-the-inspector", "globex": "key-of-globex-for-the-inspector"}
XSS = 'I pasted this: <img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script> oops'
SHOTS = Path(os.environ["MEMSTREAM_SCREENSHOTS"]) if os.environ.get("MEMSTREAM_SCREENSHOTS") else None


def chromium() -> str:
    path = os.environ.get("MEMSTREAM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no chromium: scripts/test_tools.sh installs Debian's package (or set MEMSTREAM_CHROMIUM)")
    return path


def shot(page: Any, name: str) -> None:
    if SHOTS is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


@pytest.fixture(scope="module")
def inspector(kafka, local_llm, tmp_path_factory) -> Iterator[dict[str, Any]]:
    sample = load_locomo(demo_conversation_path())[0]
    turns = list(locomo_turns(sample, tenant_id="acme", max_sessions=2))
    last = turns[-1]
    xss = Turn.model_validate(
        {**last.model_dump(), "turn_id": "D2:99", "text": XSS, "speaker": "Tomas", "metadata": {}}
    )
    later = list(locomo_turns(sample, tenant_id="acme"))[len(turns) :]
    env = {
        **local_llm,
        "MEMSTREAM_EXTRACT_MODE": "extractive",
        # One LLM budget window for the whole run (windows are aligned to the epoch): the spend test
        # never meets a window's end, so it need not wait one out.
        "MEMSTREAM_LLM_BUDGET_WINDOW_S": str(10**9),
    }
    pipe = Pipeline(kafka, tmp_path_factory.mktemp("inspector"), env)
    try:
        pipe.start_worker()
        gateway = pipe.start_gateway(KEYS)
        with MemoryClient(pipe.settings) as memory:
            memory.remember([*turns[:-1], xss, turns[-1]])
            pipe.drain()
            yield {"pipe": pipe, "url": gateway.url, "conv": sample.sample_id, "memory": memory, "later": later}
    finally:
        pipe.stop_workers()


@pytest.fixture(scope="module")
def browser(inspector) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def page(browser, inspector) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.on("dialog", lambda d: d.dismiss())  # an alert() from injected markup would show here
    yield page
    context.close()


def has_session(page: Any) -> bool:
    return any(c["name"] == "memstream_session" for c in page.context.cookies())


def until(condition: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def sign_in(page: Any, url: str, key: str) -> None:
    # The browser's cookie store and what the test's requests (page.request) read of it may lag the
    # page by a moment under load: wait for the old session to be gone and the new one to be there.
    page.context.clear_cookies()
    until(lambda: not has_session(page), "the old session cookie to go")
    page.goto(f"{url}/ui")
    page.wait_for_selector("#key", state="visible")
    page.fill("#key", key)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#nav", state="visible")
    until(lambda: has_session(page), "the session cookie")


def test_a_key_opens_a_session_cookie_and_lists_the_conversations(inspector, page):
    url, conv = inspector["url"], inspector["conv"]
    page.goto(f"{url}/ui")
    page.wait_for_selector("#key", state="visible")
    shot(page, "login")
    page.fill("#key", "not-a-key")
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#login-error:has-text('Unknown API key')")
    sign_in(page, url, KEYS["acme"])
    page.wait_for_selector(f"#conversations tr[data-conversation-id='{conv}']")
    row = page.locator(f"#conversations tr[data-conversation-id='{conv}'] td")
    assert int(row.nth(1).inner_text()) == 21  # 20 turns of two sessions and the markup one
    assert int(row.nth(2).inner_text()) > 0  # cards
    shot(page, "conversations")
    cookies = {c["name"]: c for c in page.context.cookies()}
    session = cookies["memstream_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict" and not session["secure"]  # plain http here
    assert KEYS["acme"] not in session["value"] and KEYS["acme"] not in page.url
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads it
    headers = page.request.get(f"{url}/ui").headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "unsafe-inline" not in headers["content-security-policy"]


def test_selecting_a_card_lights_up_its_turns_and_shows_its_versions(inspector, page):
    url, conv = inspector["url"], inspector["conv"]
    sign_in(page, url, KEYS["acme"])
    page.goto(f"{url}/ui#/c/{conv}")
    page.wait_for_selector(".card[data-card-id]")
    card = page.locator(".card[data-card-id]").filter(has_text="pottery").first
    turn_ids = set(eval(card.get_attribute("data-turn-ids")))  # a JSON list of strings
    assert turn_ids
    card.click()
    page.wait_for_selector("#lineage .card")
    lit = {
        page.locator(".turn.lit").nth(i).get_attribute("data-turn-id") for i in range(page.locator(".turn.lit").count())
    }
    assert lit == turn_ids
    shot(page, "timeline")
    # and the other way: a turn lights up what came of it
    first = sorted(turn_ids)[0]
    page.locator(f".turn[data-turn-id='{first}']").click()
    page.wait_for_selector("#derived")
    lit_cards = page.locator(".card.lit")
    assert lit_cards.count() >= 1
    for i in range(lit_cards.count()):
        assert first in eval(lit_cards.nth(i).get_attribute("data-turn-ids"))


def test_a_turn_holding_markup_is_shown_as_text(inspector, page):
    url, conv = inspector["url"], inspector["conv"]
    sign_in(page, url, KEYS["acme"])
    page.goto(f"{url}/ui#/c/{conv}")
    turn = page.wait_for_selector(".turn[data-turn-id='D2:99']")
    assert "<script>window.__xss=2</script>" in turn.inner_text()
    assert page.locator("#turns img").count() == 0 and page.locator("#turns script").count() == 0
    assert page.evaluate("window.__xss") is None


def test_a_question_shows_its_answer_plan_and_the_gold_turn_among_the_evidence(inspector, page):
    url, conv = inspector["url"], inspector["conv"]
    sign_in(page, url, KEYS["acme"])
    page.goto(f"{url}/ui#/c/{conv}/ask")
    page.fill("#question", "Who teaches Nora's pottery class?")
    page.click("#ask-form button[type=submit]")
    page.wait_for_selector("#evidence tr.evidence", timeout=60_000)
    cited = {t.strip() for cell in page.locator("#evidence .turn-ids").all_inner_texts() for t in cell.split(",")}
    assert "D1:3" in cited
    assert page.inner_text("#answer").strip()  # the local LLM's answer (or why there is none)
    assert "access profile" in page.inner_text("#plan")
    assert "total_ms" in page.inner_text("#steps")
    shot(page, "ask")


def test_a_state_change_without_the_csrf_token_is_refused(inspector, page):
    url, conv = inspector["url"], inspector["conv"]
    sign_in(page, url, KEYS["acme"])
    # The page's own request context carries the session cookie, not the token the script adds.
    refused = page.request.post(f"{url}/ui/api/conversations/{conv}/forget", data={"speaker": "Nora"})
    assert refused.status == 403
    with_token = page.request.post(
        f"{url}/ui/api/conversations/{conv}/ask",
        data={"question": "What is Tomas's dog called?", "answer": False},
        headers={"X-CSRF-Token": page.request.get(f"{url}/ui/api/session").json()["csrf"]},
    )
    assert with_token.status == 200 and with_token.json()["ok"]


def test_turns_streamed_in_appear_on_the_open_timeline(inspector, page):
    url, conv = inspector["url"], inspector["conv"]
    sign_in(page, url, KEYS["acme"])
    reads: list[tuple[str, int]] = []  # (query, body size) of every timeline read the page makes

    def on_response(response: Any) -> None:
        where = urlsplit(response.url)
        if where.path == f"/ui/api/conversations/{conv}":
            reads.append((where.query, int(response.headers.get("content-length", "-1"))))

    page.on("response", on_response)
    page.goto(f"{url}/ui#/c/{conv}")
    page.wait_for_selector(".turn[data-turn-id='D1:1']")
    new = inspector["later"][:3]
    inspector["memory"].remember(new)
    deadline = time.monotonic() + 90
    for turn in new:
        page.wait_for_selector(
            f".turn[data-turn-id='{turn.turn_id}']", timeout=max(1, deadline - time.monotonic()) * 1000
        )
    # Then what comes of them (their flush's scene and cards), put into the page by the polls.
    page.wait_for_function(
        """ids => Array.from(document.querySelectorAll('.card')).some(
             c => JSON.parse(c.dataset.turnIds).some(t => ids.includes(t)))""",
        arg=[t.turn_id for t in new],
        timeout=max(1, deadline - time.monotonic()) * 1000,
    )
    assert page.locator(".turn").count() == int(page.inner_text("#summary").split(" turns")[0])
    # The polls read from the first turn still arriving, not the whole conversation each time.
    asked = [({k: int(v[0]) for k, v in parse_qs(query).items()}, size) for query, size in reads]
    full = [size for q, size in asked if q.get("cursor", 0) == 0 and q.get("limit") != 1]  # not the probe
    deltas = [size for q, size in asked if q.get("cursor", 0) > 0]
    assert deltas, reads
    assert max(deltas) < full[0], (deltas, full)


def shown_seqs(page: Any) -> list[int]:
    return [int(s) for s in page.eval_on_selector_all(".turn[data-seq]", "ts => ts.map(t => t.dataset.seq)")]


def test_a_long_conversation_opens_on_its_latest_turns_and_pages_back(inspector, page):
    url, conv = inspector["url"], inspector["conv"]
    sign_in(page, url, KEYS["acme"])
    page.goto(f"{url}/ui?page=5#/c/{conv}")  # 5 positions a page
    page.wait_for_selector("#pages #earlier")
    latest = shown_seqs(page)
    whole = page.request.get(f"{url}/ui/api/conversations/{conv}?limit=5000").json()
    assert latest == sorted(latest) and latest[-1] == whole["summary"]["last_seq"] and latest[0] == latest[-1] - 4
    assert page.locator("#pages #later").count() == 0
    page.click("#pages #earlier")
    page.wait_for_selector("#pages #later")
    earlier = shown_seqs(page)
    assert len(earlier) == 5 and earlier[-1] < latest[0] and page.locator("#pages #latest").count() == 1
    page.goto(f"{url}/ui?page=5#/c/{conv}/from/0")
    page.wait_for_selector(".turn[data-turn-id='D1:1']")
    first = shown_seqs(page)
    assert first == sorted(first) and first[0] == 0 and len(first) == 5 and page.locator("#pages #earlier").count() == 0
    page.click("#pages #later")
    page.wait_for_function("n => document.querySelector('.turn[data-seq]').dataset.seq == n", arg=str(first[-1] + 1))
    assert shown_seqs(page)[0] == first[-1] + 1


def test_another_tenant_sees_nothing_of_it(inspector, browser, page):
    url, conv = inspector["url"], inspector["conv"]
    sign_in(page, url, KEYS["acme"])
    page.goto(f"{url}/ui#/c/{conv}")
    card_id = page.wait_for_selector(".card[data-card-id]").get_attribute("data-card-id")
    context = browser.new_context()
    other = context.new_page()
    try:
        sign_in(other, url, KEYS["globex"])
        other.wait_for_selector("#no-conversations")
        assert other.request.get(f"{url}/ui/api/conversations/{conv}").status == 404
        assert other.request.get(f"{url}/ui/api/memories/{card_id}").status == 404
        assert other.request.get(f"{url}/ui/api/conversations/{conv}/export").status == 404
        other.goto(f"{url}/ui#/c/{conv}")
        other.wait_for_selector("#not-found")
    finally:
        context.close()
    assert page.request.get(f"{url}/ui/api/memories/{card_id}").status == 200


def test_export_gives_the_conversation_as_jsonl(inspector, page):
    url, conv = inspector["url"], inspector["conv"]
    sign_in(page, url, KEYS["acme"])
    response = page.request.get(f"{url}/ui/api/conversations/{conv}/export")
    assert response.status == 200 and "attachment" in response.headers["content-disposition"]
    import orjson

    records = [orjson.loads(line) for line in response.body().splitlines()]
    assert {r["collection"] for r in records} >= {"turns", "cards", "scenes"}
    assert all(r["tenant_id"] == "acme" and r["conversation_id"] == conv for r in records)


def test_memstream_export_runs_beside_the_worker_over_request_reply(inspector, tmp_path):
    pipe, conv = inspector["pipe"], inspector["conv"]
    out = tmp_path / "export.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memstream.streams.cli",
            "export",
            "--tenant",
            "acme",
            "--conversation",
            conv,
            "-o",
            str(out),
        ],
        env={**os.environ, **pipe.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert pipe.workers and pipe.workers[0].alive()  # the embedded store stayed the worker's
    import orjson

    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert f"exported {len(records)} records" in done.stdout
    assert {r["collection"] for r in records} >= {"turns", "cards", "scenes", "triggers"}
    assert "D1:3" in {r.get("turn_id") for r in records}


def test_forgetting_a_speaker_takes_their_cards_away(inspector, page):
    url, conv = inspector["url"], inspector["conv"]
    sign_in(page, url, KEYS["acme"])
    page.goto(f"{url}/ui#/c/{conv}")
    page.wait_for_selector(".card[data-speaker='Tomas']")
    page.click("button.forget-speaker[data-speaker='Tomas']")
    assert "Tomas" in page.inner_text("#dialog-text")
    shot(page, "forget")
    page.click("#dialog-confirm")
    page.wait_for_selector("#forget-result:has-text('Forgot')", timeout=120_000)
    assert "store:" in page.inner_text("#forget-result") or "turns" in page.inner_text("#forget-result")
    page.reload()
    page.wait_for_selector(".card[data-speaker='Nora']")
    assert page.locator(".card[data-speaker='Tomas']").count() == 0
    assert page.locator(".turn .speaker", has_text="Tomas:").count() == 0


def test_the_conversations_page_shows_the_tenants_llm_spend_and_import_progress_over_every_worker(inspector, page):
    """What the workers publish on llm.usage (here: written as two workers of acme and one of globex
    would), summed for the signed-in tenant's current budget window; globex's stays apart. The same for
    import.progress: what acme's import sent against what its workers let in."""
    pipe, url = inspector["pipe"], inspector["url"]
    window_s = pipe.settings.llm_budget_window_s
    assert window_s - time.time() % window_s > 3600, "the fixture's window does not end during the test"
    start = datetime.fromtimestamp(time.time() // window_s * window_s, timezone.utc)
    now = datetime.now(timezone.utc)

    def usage(tenant: str, worker: str, calls: int, tokens: int, **fallbacks: int) -> LlmUsage:
        return LlmUsage(
            tenant_id=tenant,
            window_start=start,
            window_s=window_s,
            worker=worker,
            calls=calls,
            tokens=tokens,
            fallbacks=fallbacks,
            updated_at=now,
        )

    earlier = start - timedelta(seconds=window_s)
    published = [
        usage("acme", "w1", 1, 100),
        usage("acme", "w1", 2, 700, extract=1),  # w1's later totals replace its earlier ones
        usage("acme", "w2", 3, 800, extract=2, consolidate=1),
        usage("globex", "w1", 40, 9000, extract=9),
        usage("acme", "w3", 50, 5000).model_copy(update={"window_start": earlier}),  # a window gone by
    ]
    progress = [
        ImportProgress(tenant_id="acme", counter="import-a1", role="sent", turns=300, updated_at=now),
        ImportProgress(tenant_id="acme", counter="worker-w1", role="let_in", turns=100, updated_at=now),
        ImportProgress(tenant_id="acme", counter="worker-w1", role="let_in", turns=120, updated_at=now),
        ImportProgress(tenant_id="acme", counter="worker-w2", role="let_in", turns=60, updated_at=now),
        ImportProgress(tenant_id="globex", counter="import-g1", role="sent", turns=9000, updated_at=now),
    ]
    with ThreadPoolExecutor(1) as thread:  # the browser's loop runs in this one
        for record in published:
            thread.submit(pipe.produce_raw, Topic.LLM_USAGE, record.key.encode(), record.to_bytes()).result()
        for record in progress:
            thread.submit(pipe.produce_raw, Topic.IMPORT_PROGRESS, record.key.encode(), record.to_bytes()).result()
    sign_in(page, url, KEYS["acme"])
    line = page.wait_for_selector("#llm-usage").inner_text()
    assert line.startswith("LLM this window: 5 calls, 1500 tokens")
    assert "3 flushes extracted without the LLM" in line and "1 consolidation chunks decided" in line
    imports = page.wait_for_selector("#imports").inner_text()
    assert imports.startswith("History import: 180 of 300 turns let in, 120 remaining"), imports


def test_over_its_read_limit_the_page_waits_as_told_and_still_loads(inspector, browser):
    """A page load reads three things at once; with one read a second allowed, two of them get 429 and
    Retry-After, and the page asks again when told instead of failing."""
    limits = {"acme": {"reads_per_s": 1, "burst_s": 1}}
    gateway = inspector["pipe"].start_gateway(KEYS, {"MEMSTREAM_GATEWAY_RATE_LIMITS": json.dumps(limits)})
    context = browser.new_context()
    page = context.new_page()
    try:
        sign_in(page, gateway.url, KEYS["acme"])
        page.wait_for_selector(f"#conversations tr[data-conversation-id='{inspector['conv']}']", timeout=20_000)
        page.wait_for_selector("#llm-usage")
        metrics = page.request.get(f"{gateway.url}/metrics").text()
        refused = re.search(r'memstream_gateway_rate_limited_total\{limit="reads",route="/ui"\} (\d+)', metrics)
        assert refused and int(refused.group(1)) >= 2  # the page's reads were refused, and it waited
    finally:
        context.close()
        gateway.stop()
