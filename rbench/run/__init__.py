"""Running a ranker on a task: the plan (task, variant, sample, options) and its execution into a
RunRecord (``runner``)."""
