"""Tools for test_tools.py's process test."""


def loud(text: str) -> str:
    """Upper-cases text.

    Args:
        text: The text
    """
    print("printed by the tool")
    return text.upper()


def bare(text: str):
    return text
