"""The OpenAI Agents SDK against a live server over a scripted engine: an agent with a function tool runs its tool
loop on the Responses API and on Chat Completions, and keeps its history in a server-side conversation
(`conversation_id`: the Conversations API)."""

from __future__ import annotations

import asyncio

import pytest
from server_live import MODEL
from server_scripts import AFTER_TOOL

agents = pytest.importorskip("agents", reason="openai-agents is not installed")
ANSWER = AFTER_TOOL.split("\n\n", 1)[1]


@pytest.fixture(scope="module")
def weather_agent():
    """-> make(model) -> an Agent whose get_weather tool records the cities it was called for."""
    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str, days: int = 1, metric: bool = True, ratio: float = 0.5, note: str = "") -> str:
        """Weather forecast for a city"""
        calls.append(city)
        return "18C [[after_tool]]"

    def make(model):
        return agents.Agent(name="weather", instructions="Be terse.", tools=[get_weather], model=model)

    agents.set_tracing_disabled(True)
    return make, calls


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_agent_tool_loop(base_url, weather_agent, api):
    from openai import AsyncOpenAI

    make, calls = weather_agent

    async def run():
        client = AsyncOpenAI(base_url=base_url + "/v1", api_key="dummy", max_retries=0)
        model = (agents.OpenAIResponsesModel if api == "responses" else agents.OpenAIChatCompletionsModel)(MODEL,
                                                                                                          client)
        return await agents.Runner.run(make(model), "[[weather]]")

    before = len(calls)
    result = asyncio.run(run())
    assert result.final_output == ANSWER and calls[before:] == ["Paris"]


def test_agent_history_in_a_conversation(base_url, weather_agent):
    from openai import AsyncOpenAI

    make, _ = weather_agent

    async def run():
        client = AsyncOpenAI(base_url=base_url + "/v1", api_key="dummy", max_retries=0)
        conv = await client.conversations.create()
        result = await agents.Runner.run(make(agents.OpenAIResponsesModel(MODEL, client)), "[[weather]]",
                                         conversation_id=conv.id)
        items = await client.conversations.items.list(conv.id, order="asc", limit=100)
        return result, [i.type for i in items.data]

    result, types = asyncio.run(run())
    assert result.final_output == ANSWER
    assert types == ["message", "reasoning", "message", "function_call", "function_call_output", "reasoning",
                     "message"]  # fmt: skip
