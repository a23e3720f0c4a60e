"""Console first load: bytes and time to interactive in headless Chromium, against the
raw API calls that fill the same page, side by side in one run.

Each round opens a fresh browser context (an empty cache, no cookies) on the running
stack's gateway:
  sign-in, cold    `/` until the Sign in button can be used: requests, bytes on the
                   wire (compressed, headers included), DOMContentLoaded
  sign-in, warm    the same page reloaded: the hashed bundles come from the cache
  instances, cold  signed in, `/instances` until the tenant's list is shown
  page to page     then a click on each page of the menu in turn, until its heading
                   shows and nothing on it is still loading
  raw API          the calls that page makes (session, instances, templates, specs),
                   one after another with httpx and the same cookie
Figures are medians over the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import httpx
from playwright.async_api import Page, async_playwright

from gpucloud_stack import browser as stack_browser

from .common import bench_tenant, stack_env

#: The tenant's menu, in the order a round walks it (ending where it began).
MENU = ("Storages", "Usage and costs", "Monitoring", "Admin", "Instances")
PAGE_CALLS = ("/v1/console/session", "/v1/gpu-instances?limit=100", "/v1/templates", "/v1/specs")
_WIRE_BYTES = """() => {
  const entries = [...performance.getEntriesByType("navigation"),
                   ...performance.getEntriesByType("resource")];
  return { requests: entries.length,
           bytes: entries.reduce((sum, e) => sum + e.transferSize, 0),
           domContentLoaded: performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd };
}"""


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="python -m bench console", description=__doc__)
    cli.add_argument("--rounds", type=int, default=10)
    return cli


async def _timed_sign_in_page(page: Page) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    await page.goto("/")
    await page.get_by_role("button", name="Sign in").wait_for(state="visible")
    elapsed = time.perf_counter() - started
    return elapsed, await page.evaluate(_WIRE_BYTES)


async def _page_to_page(page: Page) -> list[float]:
    """Seconds from a click in the menu to the next page shown with its data."""
    took = []
    for name in MENU:
        before = await page.locator("h1").inner_text()
        started = time.perf_counter()
        await page.get_by_role("navigation", name="Console").get_by_role("link", name=name).click()
        await page.wait_for_function(
            """(title) => document.querySelector("h1")?.textContent !== title
                 && !document.body.innerText.includes("Loading…")""",
            arg=before,
        )
        took.append(time.perf_counter() - started)
    return took


async def main(args: argparse.Namespace) -> None:
    env = stack_env()
    gateway = env["GPUCLOUD_GATEWAY_URL"]
    admin = {"Authorization": f"Bearer {env['GPUCLOUD_BOOTSTRAP_ADMIN_KEY']}"}
    async with httpx.AsyncClient(base_url=gateway, timeout=30) as http:
        _, tenant = await bench_tenant(http, admin, "bench-console")
        key = tenant["Authorization"].removeprefix("Bearer ")
    executable, libraries = stack_browser.chromium()
    launch_env: dict[str, str | float | bool] = dict(libraries)
    cold: list[float] = []
    warm: list[float] = []
    listed: list[float] = []
    raw: list[float] = []
    hops: list[float] = []
    wire_cold: list[dict[str, Any]] = []
    wire_warm: list[dict[str, Any]] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(executable), args=list(stack_browser.HEADLESS_ARGS), env=launch_env
        )
        for _ in range(args.rounds):
            context = await browser.new_context(base_url=gateway)
            page = await context.new_page()
            elapsed, wire = await _timed_sign_in_page(page)
            cold.append(elapsed)
            wire_cold.append(wire)
            elapsed, wire = await _timed_sign_in_page(page)
            warm.append(elapsed)
            wire_warm.append(wire)
            await context.close()

            context = await browser.new_context(base_url=gateway)
            signed_in = await context.request.post("/v1/console/session", data={"apiKey": key})
            assert signed_in.ok, await signed_in.text()
            page = await context.new_page()
            started = time.perf_counter()
            await page.goto("/instances")
            await page.get_by_text("No instances yet").wait_for(state="visible")
            listed.append(time.perf_counter() - started)
            hops += await _page_to_page(page)
            cookies = {c["name"]: c["value"] for c in await context.cookies()}
            await context.close()
            async with httpx.AsyncClient(base_url=gateway, cookies=cookies, timeout=30) as http:
                started = time.perf_counter()
                for path in PAGE_CALLS:
                    (await http.get(path)).raise_for_status()
                raw.append(time.perf_counter() - started)
        await browser.close()

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:7.1f} ms"

    def median(rows: list[dict[str, Any]], field: str) -> float:
        return statistics.median(float(row[field]) for row in rows)

    print(f"rounds: {args.rounds}, each in a fresh browser context (empty cache)")
    print(f"{'page':<34} {'time to interactive':>20} {'requests':>9} {'bytes':>9}")
    print(
        f"{'sign-in, cold':<34} {ms(cold):>20} {median(wire_cold, 'requests'):>9.0f}"
        f" {median(wire_cold, 'bytes'):>9.0f}"
    )
    print(
        f"{'sign-in, warm (reload)':<34} {ms(warm):>20} {median(wire_warm, 'requests'):>9.0f}"
        f" {median(wire_warm, 'bytes'):>9.0f}"
    )
    print(f"{'instances, signed in, cold':<34} {ms(listed):>20}")
    print(f"{'page to page (menu click), median':<34} {ms(hops):>20}")
    print(f"{'raw API: the page calls, in turn':<34} {ms(raw):>20}")
    print(
        f"DOMContentLoaded, cold: {median(wire_cold, 'domContentLoaded'):.1f} ms; "
        f"instances page over its raw calls: x{statistics.median(listed) / statistics.median(raw):.2f}"
    )
