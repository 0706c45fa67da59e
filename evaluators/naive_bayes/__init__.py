"""Naive Bayes from sufficient statistics: exact, DP (central) or randomized-response counts."""

from evaluators.naive_bayes.central import model_from_release, train_central
from evaluators.naive_bayes.model import NaiveBayesModel

__all__ = ["NaiveBayesModel", "model_from_release", "train_central"]
