from wrappers.prompts import FAMILIES, template_for


def test_family_per_env_id():
    assert template_for("r3l/ALFWorld-v0").family == "textgame"
    assert template_for("r3l/TextWorld-v0").family == "textgame"
    assert template_for("r3l/Countdown-v0").family == "math"
    assert template_for("r3l/WebShop-v0").family == "webshop"
    assert template_for("r3ltest/Corridor-v0").family == "generic"


def test_system_prompt_has_rules_grammar_and_format():
    for template in FAMILIES.values():
        system = template.system()
        assert template.rules in system and template.grammar in system
        assert "<action>" in system


def test_user_turns_list_admissible_actions_and_feedback():
    t = FAMILIES["textgame"]
    first = t.first_user("put a mug in the coffee machine", "You are in a kitchen.", ["look", "go to fridge 1"])
    assert first.startswith("Task: put a mug")
    assert "- look\n- go to fridge 1" in first
    assert "Admissible" not in t.next_user("obs", None)
    fb = t.next_user("obs", ["look"], feedback=t.feedback("the reply has no <action>...</action>"))
    assert fb.startswith("Your reply could not be used") and fb.endswith("- look")
    many = t.next_user("obs", [f"a{i}" for i in range(500)])
    assert "(and 440 more)" in many
