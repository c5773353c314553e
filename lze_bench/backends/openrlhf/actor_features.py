"""Placeholder, replaced by the feature passes (branch ifeat)."""


class FeatureActorMixin:
    pass
