"""Request deadlines sized from the request and the server's measured speed."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from worker.deadlines import MIN_OUTPUT_BUDGET, PRIOR_S_PER_TOKEN, UNKNOWN_IMAGE_TOKENS, DeadlinePolicy, prompt_tokens


def image_url(width: int, height: int, fmt: str = "PNG") -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buf, format=fmt)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()


def body(*images: str, text: str = "\nLayout Detection:", **extra) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in images] + [{"type": "text", "text": text}]
    return {"model": "m", "messages": [{"role": "system", "content": "x" * 40},
                                       {"role": "user", "content": parts}], **extra}


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_prompt_tokens_count_image_patches_and_text(fmt) -> None:
    # 1036 x 1036 is MinerU's layout image: 37 x 37 patches of 28 px.
    assert prompt_tokens(body(image_url(1036, 1036, fmt))) == 37 * 37 + (40 + 18 + 3) // 4
    assert prompt_tokens(body("data:image/png;base64,bm90IGFuIGltYWdl")) == UNKNOWN_IMAGE_TOKENS + 15


def test_deadline_follows_the_measured_speed_and_the_request() -> None:
    policy = DeadlinePolicy(floor_s=5.0, slack=4.0, cap_s=600.0, max_model_len=16384)
    b = body(image_url(1036, 1036))
    prompt = prompt_tokens(b)
    cold = policy.deadline_s(b)  # before any answer: the conservative prior
    assert cold == pytest.approx(5.0 + 4.0 * PRIOR_S_PER_TOKEN * (prompt / 10 + MIN_OUTPUT_BUDGET))
    for _ in range(10):  # a fast server: 300 output tokens in 0.3 s
        policy.observe(prompt, 300, 0.3)
    fast = policy.deadline_s(b)
    assert 5.0 < fast < 8.0 < cold  # the floor plus seconds: a hang is found fast
    assert policy.deadline_s(b, attempt=2) == pytest.approx(2 * fast)  # a retry gets twice the time
    assert policy.deadline_s(body(image_url(1036, 1036), max_tokens=10)) < fast  # asks for 10 tokens
    for _ in range(64):  # the server slows down 20x under load: the deadline moves with it
        policy.observe(prompt, 300, 6.0)
    assert policy.deadline_s(b) > 10 * fast / 2
    assert policy.deadline_s(b, attempt=20) == 600.0  # never past request_timeout_s


def test_output_budget_learns_long_answers_within_the_context() -> None:
    policy = DeadlinePolicy(floor_s=1.0, slack=2.0, cap_s=60.0, max_model_len=4096)
    assert policy.output_budget({}, prompt=1000) == MIN_OUTPUT_BUDGET
    policy.observe(1000, 1800, 1.0)
    assert policy.output_budget({}, prompt=1000) == 3096  # twice 1800, capped by 4096 - 1000
    assert policy.output_budget({"max_completion_tokens": 50}, prompt=1000) == 50
