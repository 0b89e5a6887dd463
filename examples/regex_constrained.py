"""Regex- and type-constrained generation: the output always matches.

    python examples/regex_constrained.py"""
import sglite as sgl


@sgl.function
def contact_card(s, text):
    s += f"Text: {text}\n"
    s += "Phone (format 555-123-4567): " + sgl.gen("phone", regex=r"[0-9]{3}-[0-9]{3}-[0-9]{4}") + "\n"
    s += "Email: " + sgl.gen("email", regex=r"[a-z0-9._]{1,20}@[a-z0-9]{1,15}\.(com|org|net)") + "\n"
    s += "Age in years: " + sgl.gen_int("age", max_tokens=4) + "\n"
    s += "Is a customer (True/False): " + sgl.gen("customer", dtype=bool) + "\n"


if __name__ == "__main__":
    s = contact_card.run(text="Maria Lopez, 34, reached us from maria.lopez@example.com and asked us to call "
                              "her back at 415-555-0199 about her order.", backend=sgl.Runtime(), temperature=0)
    for key in ("phone", "email", "age", "customer"):
        print(f"{key:>8}: {s[key]}")
