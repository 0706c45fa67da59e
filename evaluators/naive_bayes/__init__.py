"""Naive Bayes from sufficient statistics: exact, DP (central) or randomized-response counts."""

from evaluators.naive_bayes.model import NaiveBayesModel

__all__ = ["NaiveBayesModel"]
