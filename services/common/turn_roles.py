"""The roles a conversation turn is captured with (AppendTurn). A turn's memory
gets its role as `who` when no speaker name is given, so the store and search
share this one vocabulary."""

USER = "user"
ASSISTANT = "assistant"
SYSTEM = "system"
TOOL = "tool"
ROLES = (USER, ASSISTANT, SYSTEM, TOOL)
