import pytest

from wrappers.parsing import AnswerFormat, parse_reply


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("<think>go east</think> <action>go east</action>", "go east"),
        ("<action>open fridge 1</action>", "open fridge 1"),
        ("Sure! Here it is:\n<action> take apple 1 </action>\nHope it helps.", "take apple 1"),
        ("```\n<action>look</action>\n```", "look"),
        ("```xml\n<think>x</think><action>`look`</action>\n```", "look"),
        ("<ACTION>look</ACTION>", "look"),
        ("<action>look</action> <action>look</action>", "look"),  # repeated, same action
        ("<think>maybe <action>west</action>?</think> <action>east</action>", "east"),  # drafts in think ignored
        ("<think>hmm</think> <action>go north", "go north"),  # cut off before the closing tag
        ("<action>12</action>", "12"),
        ("\ud800<action>x\udfff</action>", "x\udfff"),  # lone surrogates pass through; the env sanitises
    ],
)
def test_parses_usable_replies(text, action):
    parsed = parse_reply(text)
    assert parsed.error is None
    assert parsed.action == action


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "has no <action>"),
        ("go east", "has no <action>"),
        ("<think>go east</think>", "has no <action>"),
        ("<action></action>", "empty"),
        ("<action>   </action>", "empty"),
        ("<action>left</action><action>right</action>", "2 different actions"),
        ("\x00\x01<act ion>x", "has no <action>"),
    ],
)
def test_unusable_replies_give_errors_not_exceptions(text, needle):
    parsed = parse_reply(text)
    assert parsed.action is None
    assert needle in parsed.error


def test_huge_reply_is_parsed_quickly():
    text = "blah " * 20_000 + "<action>look</action>"
    assert parse_reply(text).action == "look"
    assert parse_reply("<" * 100_000).action is None


def test_custom_tags():
    fmt = AnswerFormat(action_tag="answer", think_tag=None)
    assert parse_reply("<answer>7</answer>", fmt).action == "7"
    assert parse_reply("<action>7</action>", fmt).action is None
    assert "<answer>" in fmt.instructions() and "think" not in fmt.instructions()
    with pytest.raises(ValueError, match="simple names"):
        AnswerFormat(action_tag="a b")
