"""Item-KNN's shrinkage (000 §5.1.3 "regularization"; session-rec's ItemKNN): exact similarities."""
from __future__ import annotations

import math

import pytest
import torch

from models import MODELS, build_model
from pipeline.errors import ParamsError
from pipeline.params import TrainParams

TP = TrainParams(dim=8, layers=1, heads=1, dropout=0.0, max_len=4)

# item 1 is in sessions {1,3} {1,2} {1,2}; item 2 in five sessions; item 3 only once (with 1):
# supports n_1 = 3, n_2 = 5, n_3 = 1, n_4 = 3; both: (1,2) 2, (1,3) 1, (2,4) 3
SESSIONS = [[1, 3], [1, 2], [2, 1], [2, 4], [4, 2], [2, 4]]


def fitted(**options):
    m = build_model("itemknn", n_items=4, max_len=4, train=TP, options=options, encoding=None)
    items = torch.tensor([i for s in SESSIONS for i in s])
    session = torch.tensor([k for k, s in enumerate(SESSIONS) for _ in s])
    m.fit(items, session)
    return m


def test_without_shrink_a_rare_item_wins_with_one_co_occurrence():
    m = fitted(neighbours=3)
    assert m.nbr[1, :2].tolist() == [3, 2]
    assert m.sim[1, :2].tolist() == pytest.approx([1 / math.sqrt(3 * 1), 2 / math.sqrt(3 * 5)])


def test_shrink_is_added_to_each_support_as_session_rec_does():
    """sim_ij = c_ij / ((n_i + l)^a (n_j + l)^(1 - a)), l = 20, a = 0.5: the popular neighbour wins."""
    m = fitted(neighbours=3, shrink=20.0)
    assert m.nbr[1, :2].tolist() == [2, 3]
    assert m.sim[1, :2].tolist() == pytest.approx([2 / math.sqrt(23 * 25), 1 / math.sqrt(23 * 21)])
    asym = fitted(neighbours=3, shrink=20.0, alpha=1.0)                  # confidence: c_ij / (n_i + l)
    assert asym.sim[1, :2].tolist() == pytest.approx([2 / 23, 1 / 23])
    scores = m(torch.tensor([[0, 4, 1]]))                               # the last item's neighbours
    assert scores[0, 1:].argsort(descending=True).add(1).tolist()[:2] == [2, 3]
    assert scores[0, 2].item() == pytest.approx(2 / math.sqrt(23 * 25), abs=1e-8)


def test_options_checked_and_paper_preset():
    with pytest.raises(ParamsError, match="shrink >= 0"):
        fitted(shrink=-1.0)
    with pytest.raises(ParamsError, match="models.itemknn.lambda"):
        fitted(**{"lambda": 20.0})
    assert MODELS["itemknn"].presets["paper"]["models"]["itemknn"] == {"neighbours": 100, "shrink": 20.0,
                                                                       "alpha": 0.5}
