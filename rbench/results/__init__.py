"""What runs leave behind: the RunRecord (``record``), leaderboards, significance, training
budgets, plots, reports, the reproduction of recipes, and the rule for ``-o`` (``outputs``)."""
