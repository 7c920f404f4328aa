"""Where prompt lengths come from: the server's /tokenize, or the tokenizer the user named."""

import httpx
import pytest

from bench import promptlen
from bench.target import Target

T = Target("http://srv", "tiny", None, 4096)


def _client(tokenize_status: int, body: bytes = b'{"detail":"Not Found"}') -> httpx.Client:
    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/tokenize":
            if tokenize_status == 200:
                return httpx.Response(200, json={"count": 7, "max_model_len": 2048, "tokens": []})
            return httpx.Response(tokenize_status, content=body)
        if req.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny", "max_model_len": 1024}]})
        return httpx.Response(404)

    return httpx.Client(transport=httpx.MockTransport(handler))


class _Tok:
    name = "fake-tok"

    def count_chats(self, convs):
        return [len(c[0]["content"].split()) + 3 for c in convs]


def test_server_tokenize_wins_when_present():
    src = promptlen.choose(T, _client(200), (_Tok(), "--tokenizer"))
    assert src.label == promptlen.SERVER_TOKENIZE and src.counter.count("a b") == 7


@pytest.mark.parametrize("status", [404, 405, 501])
def test_no_tokenize_endpoint_uses_the_named_tokenizer_and_the_models_context(status):
    src = promptlen.choose(T, _client(status), (_Tok(), "--tokenizer"))
    assert "fake-tok (--tokenizer; the server has no /tokenize)" in src.label
    assert src.counter.count("a b c") == 6 and src.counter.max_model_len == 1024


def test_no_tokenize_and_no_tokenizer_says_what_to_pass():
    msg = r"no /tokenize endpoint \(404\).*--tokenizer DIR.*Nothing was sent"
    with pytest.raises(promptlen.TokenizeError, match=msg):
        promptlen.choose(Target("http://srv", "no-such-model-here", None, 4096), _client(404), None)


def test_a_wrong_model_name_is_not_taken_for_a_missing_endpoint():
    body = b'{"error":{"message":"The model `x` does not exist.","code":404}}'
    with pytest.raises(promptlen.TokenizeError, match="served model name"):
        promptlen.choose(T, _client(404, body), (_Tok(), "--tokenizer"))
