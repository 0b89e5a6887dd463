"""SGLang frontend programs run by SGLang's own package against a server: `python sglang_programs.py URL`
prints one JSON object of results. Run in a subprocess by test_sglang_frontend.py, because `import sglang`
patches transformers and pulls in SGLang's server modules, which must not leak into the test process.
Nothing here is sglite's: only `sglang` is imported."""
from __future__ import annotations

import json
import sys


def main(url: str) -> dict:
    import sglang as sgl

    backend = sgl.RuntimeEndpoint(url)
    out: dict = {"chat_template": backend.chat_template.name, "model_path": backend.get_model_name()}

    @sgl.function
    def chat(s, question):
        s += sgl.system("You answer in one word.")
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=6, temperature=0))

    state = chat.run(question="What colour is the sky?", backend=backend)
    out["chat_text"], out["chat_answer"] = state.text(), state["answer"]
    out["chat_finish"] = state.get_meta_info("answer")["finish_reason"]

    @sgl.function
    def choose(s):
        s += "Q: Is the sky blue?\nA:" + sgl.select("pick", choices=[" yes", " no", " maybe"])

    state = choose.run(backend=backend)
    out["select"] = state["pick"]
    out["select_meta"] = state.get_meta_info("pick")

    @sgl.function
    def branches(s):
        s += "Three facts:\n"
        forks = s.fork(2)
        for i, f in enumerate(forks):
            f += f"Fact {i + 1}:" + sgl.gen("fact", max_tokens=5, temperature=0.8, stop="\n")
        forks.join()
        s += "Done." + sgl.gen("after", max_tokens=3, temperature=0)
        out["facts"] = [f["fact"] for f in forks]

    state = branches.run(backend=backend)
    out["fork_text"] = state.text()

    @sgl.function
    def typed(s):
        s += "Code: " + sgl.gen("code", regex=r"[A-Z]{2}-[0-9]{3}", max_tokens=16, temperature=1.0)
        s += "\nCount: " + sgl.gen_int("count", max_tokens=6)
        s += "\nMore: " + sgl.gen("more", max_tokens=8, temperature=0, stop_regex=r"[0-9]")

    state = typed.run(backend=backend)
    out["code"], out["count"], out["more"] = state["code"], state["count"], state["more"]

    @sgl.function
    def scored(s):
        s += "Hello" + sgl.gen("x", max_tokens=3, temperature=0, return_logprob=True, top_logprobs_num=2,
                               return_text_in_logprobs=True)

    state = scored.run(backend=backend)
    out["logprob_meta"] = state.get_meta_info("x")

    streamed = chat.run(question="Name a colour.", backend=backend, stream=True)
    out["stream_pieces"] = list(streamed.text_iter())
    out["stream_text"] = streamed.text()

    states = chat.run_batch([{"question": "One?"}, {"question": "Two?"}], backend=backend)
    out["batch_answers"] = [st["answer"] for st in states]
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
