"""The 10-line sglite program: a two-turn chat with the in-process engine.

    python examples/quickstart.py"""
import sglite as sgl


@sgl.function
def multi_turn_question(s, question_1, question_2):
    s += sgl.system("You are a helpful assistant.")
    s += sgl.user(question_1)
    s += sgl.assistant(sgl.gen("answer_1", max_tokens=64))
    s += sgl.user(question_2)
    s += sgl.assistant(sgl.gen("answer_2", max_tokens=64))


if __name__ == "__main__":
    sgl.set_default_backend(sgl.Runtime())
    state = multi_turn_question.run(question_1="What is the capital of France?",
                                    question_2="Name one famous museum there.", temperature=0)
    for m in state.messages():
        print(f"{m['role']:>9}: {m['content']}")
