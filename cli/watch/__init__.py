"""`keeper job`: watch, status, list, approve, deny, unwatch and run for iris job watches."""
