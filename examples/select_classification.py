"""Classification with `select`: the model scores each label as a continuation of a shared few-shot prompt,
all labels in one batched request over the cached prefix.

    python examples/select_classification.py"""
import sglite as sgl

LABELS = ["positive", "negative", "neutral"]
SHOTS = [("The battery lasts two full days, I love it.", "positive"),
         ("It stopped working after a week and support never answered.", "negative"),
         ("The package arrived on Tuesday.", "neutral")]


@sgl.function
def classify(s, review):
    s += "Classify the sentiment of each product review as positive, negative or neutral.\n\n"
    for text, label in SHOTS:
        s += f"Review: {text}\nSentiment: {label}\n\n"
    s += f"Review: {review}\nSentiment: "
    s += sgl.select("label", LABELS)


REVIEWS = ["Absolutely fantastic sound quality for the price.",
           "The screen cracked the first time I dropped it.",
           "It comes in black and silver.",
           "Worst purchase I have made this year.",
           "Setup took five minutes and everything just worked."]

if __name__ == "__main__":
    backend = sgl.Runtime()
    states = classify.run_batch([{"review": r} for r in REVIEWS], backend=backend)
    for review, s in zip(REVIEWS, states):
        scores = s.get_meta_info("label")["normalized_prompt_logprobs"]
        print(f"{s['label']:>8}  ({', '.join(f'{l}={v:.2f}' for l, v in zip(LABELS, scores))})  {review}")
    print(f"prefix cache hit rate: {backend.usage.cache_hit_rate:.1%}")
