"""MixPR: shrink a long text (document + question) to what answers the question.

The whole library in one call::

    from mixpr import compress
    result = compress(text, budget_tokens=4000, route="auto", ask_llm=my_llm)
    result.text    # kept chunks, in original order
    result.spans   # their (start, end) character spans in ``text``
    result.stats   # tokens/chunks before and after, route, alpha, timings

(Implementation lands with issue #2; this file pins the public contract.)
"""
