"""A small real model behind Switchyard: a sentiment classifier (bag of words,
logistic regression trained with numpy when the app starts) served by FastAPI.

Run it behind the replica agent in proxy mode (README.md here):

    npm run replica -- agent --proxy --deployment sentiment --edge http://127.0.0.1:8787 \
      --app-url http://127.0.0.1:8001 --port 9001 --max-ongoing 4 -- \
      python -m uvicorn app:app --app-dir examples/python-model --host 127.0.0.1 --port 8001

Routes:
  GET  /          health and what the model is
  POST /predict   {"text": "..."} or {"texts": [...]} -> a label and a score per text
  POST /explain   {"text": "..."} -> each word's weight, streamed as server-sent events
  GET  /stats     requests served and streams the client cancelled (tests read it)

`delay_ms` (predict) and `interval_ms` (explain) slow an answer down on purpose, to
show holding, refusals and cancellation; a real model has its own service time.
"""

import asyncio
import json
import re

import numpy as np
from fastapi import FastAPI, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

# A small labelled corpus (1 positive, 0 negative): enough for a real, if modest, model.
TRAIN = [
    ("i love this product it works great", 1),
    ("absolutely wonderful experience, would buy again", 1),
    ("fantastic quality and fast delivery", 1),
    ("the support team was helpful and kind", 1),
    ("great value, very happy with it", 1),
    ("excellent, exceeded my expectations", 1),
    ("this is the best purchase i have made", 1),
    ("works perfectly and looks beautiful", 1),
    ("really good, i recommend it", 1),
    ("happy customer, everything was fine", 1),
    ("pleasant surprise, solid and reliable", 1),
    ("amazing sound and a great battery", 1),
    ("i hate this, it broke after a day", 0),
    ("terrible quality, a waste of money", 0),
    ("awful experience, never again", 0),
    ("the support team was rude and useless", 0),
    ("very disappointed, it does not work", 0),
    ("poor build and slow delivery", 0),
    ("this is the worst purchase i have made", 0),
    ("broken on arrival, i want a refund", 0),
    ("bad, i do not recommend it", 0),
    ("unhappy customer, everything went wrong", 0),
    ("cheap and unreliable, stopped working", 0),
    ("horrible sound and a dead battery", 0),
]

TOKEN = re.compile(r"[a-z']+")


def words(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


VOCAB = {w: i for i, w in enumerate(sorted({w for text, _ in TRAIN for w in words(text)}))}


def features(text: str) -> np.ndarray:
    x = np.zeros(len(VOCAB) + 1)
    x[-1] = 1.0  # bias
    for w in words(text):
        if w in VOCAB:
            x[VOCAB[w]] += 1.0
    return x


def train(epochs: int = 400, rate: float = 0.5, l2: float = 1e-3) -> np.ndarray:
    X = np.stack([features(t) for t, _ in TRAIN])
    y = np.array([label for _, label in TRAIN], dtype=float)
    w = np.zeros(X.shape[1])
    for _ in range(epochs):
        p = 1.0 / (1.0 + np.exp(-X @ w))
        w -= rate * (X.T @ (p - y) / len(y) + l2 * w)
    return w


WEIGHTS = train()
MODEL = {"name": "sentiment-bow-logreg", "vocabulary": len(VOCAB), "trained_on": len(TRAIN)}


def predict(text: str) -> dict:
    score = float(1.0 / (1.0 + np.exp(-features(text) @ WEIGHTS)))
    return {"label": "positive" if score >= 0.5 else "negative", "score": round(score, 4)}


app = FastAPI(title="sentiment")
stats = {"served": 0, "streams": 0, "cancelled": 0}


class PredictIn(BaseModel):
    text: str | None = Field(default=None, max_length=10_000)
    texts: list[str] | None = Field(default=None, max_length=256)
    delay_ms: int = Field(default=0, ge=0, le=60_000)


class ExplainIn(BaseModel):
    text: str = Field(max_length=10_000)
    interval_ms: int = Field(default=0, ge=0, le=10_000)


@app.get("/")
def health() -> dict:
    return {"status": "ok", "model": MODEL}


@app.post("/predict")
async def predict_route(body: PredictIn) -> dict:
    if (body.text is None) == (body.texts is None):
        raise HTTPException(status_code=422, detail="give exactly one of text or texts")
    if body.delay_ms:
        await asyncio.sleep(body.delay_ms / 1000)
    stats["served"] += 1
    if body.text is not None:
        return {"model": MODEL["name"], **predict(body.text)}
    return {"model": MODEL["name"], "results": [predict(t) for t in body.texts or []]}


@app.post("/explain")
async def explain(body: ExplainIn) -> StreamingResponse:
    async def events():
        stats["streams"] += 1
        try:
            for w in words(body.text):
                weight = float(WEIGHTS[VOCAB[w]]) if w in VOCAB else 0.0
                yield f"data: {json.dumps({'word': w, 'weight': round(weight, 4)})}\n\n"
                if body.interval_ms:
                    await asyncio.sleep(body.interval_ms / 1000)
            yield f"data: {json.dumps(predict(body.text))}\n\n"
            yield "data: [DONE]\n\n"
            stats["served"] += 1
        except asyncio.CancelledError:
            # The client went away (Starlette cancels the stream): its work stops here.
            stats["cancelled"] += 1
            raise

    return StreamingResponse(events(), media_type="text/event-stream")


@app.get("/stats")
def stats_route() -> dict:
    return stats
