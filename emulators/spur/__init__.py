"""A spur controller and its agents, speaking the same proto (wire/spur)."""
