"""The built-in task families: recommendation (``recsys``, with the Amazon readers in ``amazon``),
passage ranking (``passages``), LLM routing (``routing``) and imported tasks (``imported``)."""
