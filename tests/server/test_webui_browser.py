"""The web chat in headless Chromium against `hinfer serve` on the demo model (random weights, real engine on
the CPU) with --api-key: the key prompt and a wrong key, a streamed answer, stop (the lane frees in /metrics),
Esc and Enter/Shift+Enter, regenerate, edit and resend, thinking collapsed, reload, the busy (429) message, a
phone-width layout, and the Markdown renderer's escaping. Screenshots go to $HINFER_WEBUI_SCREENSHOTS (else a
temporary folder). Skipped, saying why, without Playwright or a Chromium."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_proc import serve_process
from webui_browser import NO_BROWSER, NO_PLAYWRIGHT, launch

sync_api = pytest.importorskip("playwright.sync_api", reason=NO_PLAYWRIGHT)
KEY = "browser-test-key"
LANES = 2
WAIT_MS = 60_000  # a generous bound for anything on a shared CPU; the usual wait is a second or two
expect = sync_api.expect
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        try:
            b = launch(p)
        except sync_api.Error as e:  # a browser this Playwright cannot drive: the machine's problem, not the page's
            pytest.skip(f"Chromium did not start under Playwright: {str(e).splitlines()[0]}")
        if b is None:
            pytest.skip(NO_BROWSER)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(demo_cache, browser) -> Iterator[str]:
    # No queue: with both lanes taken the next request is a 429 at once.
    args = ["--api-key", KEY, "--max-context", "4096", "--max-concurrency", str(LANES), "--max-pending-requests", "0"]
    with serve_process(args, demo_cache) as sp:
        yield sp.url


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    given = os.environ.get("HINFER_WEBUI_SCREENSHOTS")
    path = Path(given) if given else tmp_path_factory.mktemp("webui-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 800})  # fresh localStorage per test
    context.set_default_timeout(WAIT_MS)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).text
    m = re.search(rf"^{name}{{[^}}]*}} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def wait_lanes(url: str, busy: int, timeout: float = 15.0) -> float:
    """Seconds until /metrics shows `busy` lanes taken (fails after timeout)."""
    t0 = time.monotonic()
    while metric(url, "hinfer_engine_lanes_busy") != busy:
        assert time.monotonic() - t0 < timeout, f"lanes busy did not become {busy} in {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - t0


def sign_in(page, url: str) -> None:
    page.goto(url + "/")
    page.fill("#key-input", KEY)
    page.click("#key-save")
    expect(page.locator("#key-form")).to_be_hidden()
    expect(page.locator("#model-name")).to_have_text("demo")


def settings(page, *, max_tokens: int, thinking: bool) -> None:
    page.click("#open-settings")
    page.fill("#set-temperature", "0")  # greedy: the same answers on every run
    page.fill("#set-max-tokens", str(max_tokens))
    page.set_checked("#set-thinking", thinking)
    page.click("#settings-save")
    expect(page.locator("#settings")).not_to_be_visible()


def send(page, text: str) -> None:
    page.fill("#input", text)
    page.press("#input", "Enter")


def last_answer(page):
    return page.locator(".message.assistant").last


def wait_streamed_text(page) -> None:
    """Text in the answer while it is still streaming: it arrives piece by piece, not at the end."""
    page.wait_for_function("() => { const m = document.querySelector('.message.assistant.streaming .body');"
                           " return m !== null && m.textContent.length > 0; }")


def wait_done(page):
    answer = last_answer(page)
    expect(answer).not_to_have_class(re.compile(r"\bstreaming\b"))
    return answer


def test_chat_flow(page, server, shots):
    # The key: asked for on the first visit; a wrong one is named as such.
    page.goto(server + "/")
    expect(page.locator("#key-form")).to_be_visible()
    expect(page.locator("#key-message")).to_contain_text("needs an API key")
    page.fill("#key-input", "not-the-key")
    page.click("#key-save")
    expect(page.locator("#key-message")).to_contain_text("Wrong or missing API key (401)")
    expect(page.locator("#key-message")).to_have_class("error")
    page.screenshot(path=shots / "01-wrong-key.png")
    page.fill("#key-input", KEY)
    page.click("#key-save")
    expect(page.locator("#key-form")).to_be_hidden()
    expect(page.locator("#status")).to_contain_text(f"lanes 0/{LANES} busy")

    # A short answer streams in, then shows its speed.
    settings(page, max_tokens=40, thinking=False)
    send(page, "Say hello in **bold**")
    wait_streamed_text(page)
    answer = wait_done(page)
    expect(answer.locator(".stats")).to_contain_text(re.compile(r"TTFT [\d.]+ s · [\d.]+ tok/s · 40 tokens"))
    expect(page.locator(".message.user .body strong")).to_have_text("bold")
    page.screenshot(path=shots / "02-answer.png")

    # Stop a long answer with the button: the connection closes and the server frees the lane.
    settings(page, max_tokens=3000, thinking=False)
    wait_lanes(server, 0)
    send(page, "Write a very long story")
    wait_streamed_text(page)
    assert metric(server, "hinfer_engine_lanes_busy") == 1
    aborted = metric(server, "hinfer_requests_aborted_total")
    page.click("#stop")
    freed_s = wait_lanes(server, 0)
    print(f"lane freed {freed_s:.2f} s after the stop button")
    expect(last_answer(page).locator(".stats")).to_contain_text("stopped")
    assert metric(server, "hinfer_requests_aborted_total") == aborted + 1
    expect(page.locator("#status")).to_contain_text(f"lanes 0/{LANES} busy")
    expect(page.locator("#send")).to_be_visible()
    page.screenshot(path=shots / "03-stopped.png")

    # Keyboard: Shift+Enter is a new line, Enter sends, Esc stops.
    page.fill("#input", "first line")
    page.press("#input", "Shift+Enter")
    page.type("#input", "second line")
    assert page.input_value("#input") == "first line\nsecond line"
    page.press("#input", "Enter")
    wait_streamed_text(page)
    page.keyboard.press("Escape")
    expect(last_answer(page).locator(".stats")).to_contain_text("stopped")
    wait_lanes(server, 0)
    expect(page.locator(".message.user").last.locator(".body")).to_contain_text("first line")
    expect(page.locator(".message.user").last.locator(".body br")).to_have_count(1)

    # Regenerate replaces the last answer; edit and resend cuts the conversation after the edited message.
    settings(page, max_tokens=8, thinking=False)
    n = page.locator(".message").count()
    old_id = last_answer(page).get_attribute("data-id")
    last_answer(page).locator(".regenerate").click()
    wait_done(page)
    assert page.locator(".message").count() == n and last_answer(page).get_attribute("data-id") != old_id
    page.locator(".message.user").first.locator(".edit").click()
    page.fill(".edit-area", "An edited question")
    page.click(".save-edit")
    wait_done(page)
    expect(page.locator(".message")).to_have_count(2)
    expect(page.locator(".message.user .body")).to_have_text("An edited question")

    # Thinking: streamed into a collapsed block that opens on a click.
    settings(page, max_tokens=12, thinking=True)
    send(page, "Think first")
    thinking = wait_done(page).locator("details.thinking")
    expect(thinking).to_be_visible()
    assert thinking.get_attribute("open") is None
    expect(thinking.locator(".thinking-body")).not_to_be_visible()
    thinking.locator("summary").click()
    expect(thinking.locator(".thinking-body")).to_be_visible()

    # Reload: the conversation, the settings and the key come back from the browser's storage.
    wait_lanes(server, 0)
    page.reload()
    expect(page.locator("#conversations li.active")).to_contain_text("An edited question")
    expect(page.locator(".message.user").first.locator(".body")).to_have_text("An edited question")
    expect(page.locator(".message")).to_have_count(4)
    expect(page.locator("#key-form")).to_be_hidden()
    expect(page.locator("#status")).to_contain_text("lanes")
    page.screenshot(path=shots / "04-reloaded.png")


def test_busy_server_says_so(page, server, shots):
    """Both lanes taken by other clients and no queue: the page shows the 429 in words, and retrying works."""
    sign_in(page, server)
    settings(page, max_tokens=8, thinking=False)
    wait_lanes(server, 0)
    release = threading.Event()

    def hog() -> None:
        body = {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3000, "stream": True}
        with httpx.stream("POST", f"{server}/v1/chat/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {KEY}"}) as r:
            for _ in r.iter_lines():
                if release.is_set():
                    return

    hogs = [threading.Thread(target=hog, daemon=True) for _ in range(LANES)]
    for t in hogs:
        t.start()
    try:
        wait_lanes(server, LANES)
        send(page, "Are you there?")
        error = wait_done(page).locator(".error")
        expect(error).to_contain_text("The server is busy (429)")
        expect(last_answer(page).locator(".stats")).to_have_text("")  # no speed line for an answer that never began
        page.screenshot(path=shots / "05-busy.png")
    finally:
        release.set()
        for t in hogs:
            t.join(30)
    wait_lanes(server, 0)
    last_answer(page).locator(".regenerate").click()
    expect(wait_done(page).locator(".stats")).to_contain_text("8 tokens")


def test_phone_width(browser, server, shots):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        sign_in(page, server)
        settings(page, max_tokens=16, thinking=False)
        send(page, "Hello from a phone")
        wait_done(page)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing sideways
        box = page.locator("#sidebar").bounding_box()
        assert box is None or box["x"] + box["width"] <= 0  # the sidebar waits off screen
        expect(page.locator("#input")).to_be_in_viewport()
        expect(page.locator("#send")).to_be_in_viewport()
        page.screenshot(path=shots / "06-phone.png")
        page.click("#toggle-sidebar")
        expect(page.locator("#conversations")).to_contain_text("Hello from a phone")
        page.wait_for_function("() => document.getElementById('sidebar').getBoundingClientRect().x >= 0")
        page.screenshot(path=shots / "07-phone-sidebar.png")
    finally:
        context.close()


_RENDER = """async (src) => {
  const { renderMarkdown } = await import('/webui/markdown.js');
  const box = document.createElement('div');
  box.append(renderMarkdown(src));
  document.body.append(box);
  return { html: box.innerHTML, text: box.textContent,
           tags: [...box.querySelectorAll('*')].map((e) => e.tagName.toLowerCase()),
           links: [...box.querySelectorAll('a')].map((a) => a.getAttribute('href')),
           code: [...box.querySelectorAll('pre code')].map((c) => c.textContent),
           pwned: window.pwned === true };
}"""

_EVIL = """<img src=x onerror="window.pwned=true"> <script>window.pwned=true</script>
**bold** and *it* and `<b>code</b>` and [x](javascript:window.pwned=true) and [ok](https://example.com)

```html
<script>window.pwned=true</script>
```

| a | b |
|---|--:|
| <i>1</i> | 2 |

- one
- two
  1. nested

> quoted &amp; <u>text</u>
"""


def test_markdown_renders_and_escapes(page, server):
    page.goto(server + "/")
    out = page.evaluate(_RENDER, _EVIL)
    assert not out["pwned"]
    assert not {"img", "script", "b", "i", "u"} & set(out["tags"]), out["tags"]
    assert '<img src=x onerror="window.pwned=true">' in out["text"] and "<u>text</u>" in out["text"]
    assert "&amp;" in out["text"]  # an entity stays as written
    assert {"strong", "em", "code", "pre", "table", "ul", "ol", "blockquote", "button"} <= set(out["tags"])
    assert out["links"] == ["https://example.com"]  # the javascript: link stays text
    assert out["code"] == ["<script>window.pwned=true</script>"]
    assert "text-align: right" in out["html"]
    # The copy button of the code block puts the code on the clipboard.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.locator(".code-block .copy").last.click()
    expect(page.locator(".code-block .copy").last).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "<script>window.pwned=true</script>"


def test_tool_calls_and_errors_are_shown(page, server):
    page.goto(server + "/")
    out = page.evaluate("""async () => {
      const { MessageView } = await import('/webui/message_view.js');
      const v = new MessageView({ id: 'm', role: 'assistant', content: '', reasoning: 'hmm',
        toolCalls: [{ id: 'c1', name: 'get_weather', arguments: '{"city": "<Paris>"}' }],
        stats: { ttft_s: 0.5, tokens_per_s: 20, tokens: 9, finish: 'tool_calls' } });
      document.body.append(v.root);
      return { name: v.root.querySelector('.tool-name').textContent,
               args: JSON.parse(v.root.querySelector('.tool-args').textContent),
               stats: v.root.querySelector('.stats').textContent,
               open: v.root.querySelector('details').open };
    }""")
    assert out == {"name": "tool call: get_weather", "args": {"city": "<Paris>"}, "open": False,
                   "stats": "TTFT 0.50 s · 20.0 tok/s · 9 tokens · finish: tool_calls"}
