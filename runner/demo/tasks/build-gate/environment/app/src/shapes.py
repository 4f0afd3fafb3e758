def area_square(side):
    return side * side


def area_rect(w, h)
    # TODO: finish me (this file does not compile yet)
