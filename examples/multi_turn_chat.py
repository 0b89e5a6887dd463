"""A multi-turn chat loop: each turn appends to the same state, so the conversation so far stays in the
prefix cache and only the new turn is prefilled. Streams the replies.

    python examples/multi_turn_chat.py            # scripted turns
    python examples/multi_turn_chat.py --interactive"""
import sys

import sglite as sgl


@sgl.function
def chat_turn(s, history, message):
    s += sgl.system("You are a friendly travel assistant. Answer in at most three sentences.")
    for user, assistant in history:
        s += sgl.user(user)
        s += sgl.assistant(assistant)
    s += sgl.user(message)
    s += sgl.assistant(sgl.gen("reply", max_tokens=96))


def main() -> None:
    backend = sgl.Runtime()
    history: list[tuple[str, str]] = []
    scripted = ["What are three things to see in Paris?", "What food should I try there?",
                "Which of those is best for a rainy day?"]
    interactive = "--interactive" in sys.argv
    turns = iter(lambda: input("you> "), "") if interactive else iter(scripted)
    for message in turns:
        if not interactive:
            print(f"you> {message}")
        state = chat_turn.run(history=history, message=message, backend=backend, stream=True, temperature=0)
        print("bot> ", end="", flush=True)
        for piece in state.text_iter("reply"):
            print(piece, end="", flush=True)
        print()
        history.append((message, state["reply"]))
    print(f"\nprefix cache hit rate: {backend.usage.cache_hit_rate:.1%}")


if __name__ == "__main__":
    main()
