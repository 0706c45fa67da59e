"""Privacy-preserving collaborative filtering with randomized perturbation and ROUSTIDA.

Reproduces Öztürk (2017), "Improving accuracy of privacy-preserving collaborative filtering
methods by rough sets theory" (notes: ``../shared/papers/ppcf-rough-sets-roustida.md``):

- ``data``: MovieLens ratings in DuckDB, the 700/243 user split, true z-scores;
- ``masking``: Polat & Du randomized perturbation (client side);
- ``ldp``: a local-DP alternative (Laplace on bounded ratings, ε per rating);
- ``roustida``: discretization (Eq. 2.1) and the cleaned ROUSTIDA imputation;
- ``recommenders`` / ``clustering``: user-based, item-based and k-means-based kNN;
- ``metrics``: MAE, RMSE and coverage; ``attacks``: what an RPT release discloses;
- ``matrix`` / ``randomness``: long <-> dense conversion; CSPRNG-by-default generators;
- ``pipeline``: one (perturbation, fill, method) run end to end;
- ``cli``: ``dpsql evaluate cf``.
"""
