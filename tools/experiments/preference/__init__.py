"""What the preference chapters (50, 17, PT-KTO, 51) share.

`judge` -- the arithmetic verifier as a pointwise score and as a pairwise judge that can carry a
position bias (it names the first answer shown without reading, with a set probability).
"""
