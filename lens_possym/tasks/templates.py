"""The words and templates of binding prompts (:mod:`.binding`): the built-in entity and
attribute pools, :class:`BindingTemplate` (one statement, one question) and
:data:`BINDING_TEMPLATES` (``"color"``, ``"city"``, ``"animal"``, ``"object"``).

Which words of a pool are usable depends on the tokenizer (one token where the template
puts them): :func:`lens_possym.tasks.binding.check_words` decides, per word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import InvalidSelectionError

__all__ = ["BindingTemplate", "BINDING_TEMPLATES", "binding_template", "DEFAULT_ENTITIES",
           "MORE_ENTITIES", "DEFAULT_COLORS", "CITIES", "ANIMALS", "OBJECTS"]

DEFAULT_ENTITIES: tuple[str, ...] = tuple(
    "Alice Bob Carol Dave Emma Frank Grace Henry Ivy Jack Kate Leo Mia Nick Olivia Paul "
    "Quinn Rose Sam Tom Uma Victor Wendy Xavier Yara Zoe Anna Ben Chloe Dan Eva Finn Gina "
    "Hugo Iris Jake Lily Max Nora Oscar Peter Ruby Sara Tim Vera Will Amy Adam Beth Carl "
    "Dora Eric Fred Gary Hank Ida Joe Kim Liam Mark Ned Owen Pam Ray Sue Ted Val Wes Zack "
    "Luke John Mary Jane Lucy Rita Tina Alan Bill Emily Greg Jill Kyle Lisa Mike Neil Rob "
    "Ruth Steve Todd".split()
)
#: More first names, none in :data:`DEFAULT_ENTITIES` (used when those are too few).
MORE_ENTITIES: tuple[str, ...] = tuple(
    "Aaron Abby Abel Ada Adrian Agnes Albert Alex Alexander Alfred Ali Allen Amanda Amber "
    "Andrea Andrew Andy Angela Anita Ann Anne Annie Anthony Arnold Arthur Ashley Austin "
    "Barbara Barry Becky Benjamin Bernard Betty Beverly Billy Blake Bonnie Brad Bradley "
    "Brandon Brenda Brian Bruce Bryan Caleb Cameron Carlos Caroline Carrie Catherine Charles "
    "Charlie Chris Christian Christine Christopher Cindy Claire Clara Clark Craig Cynthia "
    "Daisy Dale Daniel Danny David Dean Debbie Dennis Derek Diana Diane Dolly Donald Donna "
    "Doris Douglas Duke Dylan Earl Eddie Edgar Edith Edward Edwin Elaine Eleanor Eli Elijah "
    "Elizabeth Ella Ellen Ellie Elsa Elvis Emil Erin Ernest Ethan Eugene Evan Evelyn Felix "
    "Fiona Floyd Frances Francis Gabriel George Gerald Gilbert Gloria Gordon Graham Hannah "
    "Harold Harriet Harry Harvey Hazel Heather Helen Howard Ian Irene Isaac Isabel Jacob "
    "James Jamie Janet Jason Jean Jeff Jeffrey Jennifer Jenny Jeremy Jerry Jesse Jessica Jim "
    "Jimmy Joan Joel Johnny Jonathan Jordan Joseph Josh Joshua Joyce Judy Julia Julian Julie "
    "Justin Karen Karl Katie Keith Kelly Ken Kenneth Kevin Laura Lauren Lee Leon Leonard "
    "Leslie Lewis Lincoln Linda Logan Louis Louise Lynn Marcus Margaret Maria Marie Marilyn "
    "Mario Martha Martin Marvin Matt Matthew Maurice Megan Melissa Michael Michelle Miles "
    "Milton Molly Monica Morgan Nancy Natalie Nathan Nicole Noah Norman Oliver Otto Patricia "
    "Patrick Paula Pedro Penny Phil Philip Phillip Rachel Ralph Randy Raymond Rebecca Richard "
    "Rick Robert Robin Roger Ronald Ross Roy Russell Ryan Sally Samuel Sandra Sarah Scott "
    "Sean Seth Sharon Shirley Simon Sophia Sophie Stanley Stella Stephen Stuart Susan Tara "
    "Taylor Teresa Terry Theodore Thomas Timothy Tony Tracy Travis Troy Tyler Vincent Violet "
    "Virginia Walter Warren Wayne Wilson Yvonne Zachary Abe Ahmed Al Alma Amos Ana Andre "
    "Angel Angie Archie Ariel Asa Ava Axel Bart Bea Bella Bert Bess Bianca Bo Boris Brett "
    "Bruno Bud Cal Carmen Cary Cecil Celia Chad Chet Cliff Clyde Cody Colin Connor Cora Dana "
    "Dante Darren Dee Della Dex Diego Dina Dirk Dom Don Doug Drew Duncan Dustin Ed Eden Edna "
    "Elena Eliza Elmer Elton Enzo Ezra Fay Fern Flora Flynn Ford Gail Gene Gus Gwen Hal Hans "
    "Hector Heidi Herb Herman Holly Homer Hope Igor Ira Ivan Jade Jan Jay Jed Jen Jess Joy "
    "Juan Jude June Kai Kara Kay Kent Kirk Kurt Lana Lara Lars Lena Levi Lila Lola Lou Luca "
    "Lucas Luis Lyle Mabel Mack Mae Maya Mel Milo Mona Moses Nadia Nate Neal Nell Nina Noel "
    "Nova Ola Omar Opal Otis Pablo Pete Piper Rex Rhys Rich Rico Rod Roman Ron Rosa Rudy "
    "Russ Ryder Sage Sal Saul Shane Sid Silas Sonia Stan Sven Tess Theo Toby Vic Vince Wade "
    "Walt Wanda Wyatt Yuri Zara Zeke".split()
)
DEFAULT_COLORS: tuple[str, ...] = tuple(
    "red blue green yellow black white orange purple pink brown gray gold silver violet "
    "cyan teal navy maroon beige tan".split()
)
CITIES: tuple[str, ...] = tuple(
    "Paris London Berlin Rome Madrid Tokyo Moscow Vienna Prague Dublin Oslo Athens Lisbon "
    "Cairo Delhi Beijing Seoul Sydney Toronto Chicago Boston Miami Dallas Denver Houston "
    "Seattle Atlanta Phoenix Detroit Austin Portland Vancouver Montreal Mexico Lima Bangkok "
    "Singapore Manila Dubai Istanbul Warsaw Budapest Brussels Amsterdam Zurich Geneva Munich "
    "Milan Naples Venice Florence Barcelona Seville Lyon Marseille Hamburg Stockholm Helsinki "
    "Copenhagen Edinburgh Glasgow Manchester Liverpool Oxford Cambridge Bristol Leeds York "
    "Kyoto Osaka Shanghai Mumbai Nairobi Lagos Havana Rio Santiago Quebec Ottawa Calgary "
    "Melbourne Auckland Perth Brisbane Tehran Baghdad Jerusalem Kiev Riga Minsk Sofia "
    "Belgrade Zagreb Bucharest Cologne Frankfurt Dresden Leipzig Hanover Vegas Orlando "
    "Memphis Nashville Pittsburgh Baltimore Cleveland Cincinnati Buffalo Sacramento Oakland "
    "Honolulu".split()
)
ANIMALS: tuple[str, ...] = tuple(
    "dog cat horse cow pig sheep goat duck chicken rabbit mouse rat bird fish frog snake "
    "lion tiger bear wolf fox deer monkey elephant giraffe zebra camel whale shark dolphin "
    "eagle owl crow swan goose turtle bee ant spider snail crab hawk parrot penguin seal "
    "otter beaver squirrel donkey mule bull ox pony lamb kitten puppy bat moth worm lizard "
    "hamster llama panda kangaroo gorilla".split()
)
OBJECTS: tuple[str, ...] = tuple(
    "book key cup pen hat coat bag box chair table lamp clock phone ring watch shoe sock "
    "shirt ball bike car boat kite map coin card letter bottle glass plate bowl spoon fork "
    "knife pot pan candle mirror brush comb towel blanket pillow bed door window fence gate "
    "rope chain wheel drum flute guitar piano violin bell whistle camera radio laptop tablet "
    "printer screen keyboard ticket wallet purse basket bucket ladder hammer nail screw saw "
    "drill shovel broom mop sponge soap bread cake apple banana orange lemon grape cherry "
    "peach pear plum melon cookie pie pizza sandwich egg cheese milk juice tea coffee sugar "
    "salt pepper rice soup salad carrot potato onion tomato corn bean nut flower tree leaf "
    "rock stone shell feather sword shield bow arrow helmet crown flag badge medal trophy "
    "stamp envelope notebook folder pencil marker crayon ruler eraser tape glue scissors "
    "needle thread button zipper belt scarf glove mitten boot sandal jacket sweater dress "
    "skirt tie umbrella tent torch lantern compass anchor sail paddle barrel crate jar vase "
    "tray mug kettle oven fridge stove sink toilet bath shower couch sofa desk shelf cabinet "
    "drawer rug carpet curtain painting poster statue toy doll puzzle robot rocket balloon "
    "ribbon gift parcel package token pass license passport diary journal magazine "
    "newspaper novel album record disk cable plug battery bulb switch socket fan heater "
    "cooler engine motor pump valve pipe hose tire seat saddle harness leash collar cage "
    "nest hive shed barn cottage cabin tower bridge tunnel stick bench bin blade chart "
    "check file frame game gun horn jewel lock mask net note pin plan prize rack rod "
    "scale sheet sign spring tool trap trunk tube vest wire".split()
)


@dataclass(frozen=True)
class BindingTemplate:
    """How a binding prompt is written.

    Attributes:
        statement: one binding, with ``{entity}`` and ``{attribute}``.
        question: the query, with ``{entity}`` (may appear more than once); the answer
            is the token that follows it.
        joiner: between statements.
        preamble: text before the first statement (then joined by ``joiner``).
        attribute_pool: the attributes :func:`binding_task` draws from by default.
    """

    statement: str = "{entity} likes {attribute}."
    question: str = "\nQuestion: What color does {entity} like?\nAnswer: {entity} likes"
    joiner: str = " "
    preamble: str = ""
    attribute_pool: tuple[str, ...] = DEFAULT_COLORS

    def __post_init__(self) -> None:
        for name, text, needed in (("statement", self.statement, ("{entity}", "{attribute}")),
                                   ("question", self.question, ("{entity}",))):
            missing = [n for n in needed if n not in text]
            if missing:
                raise InvalidSelectionError(
                    f"the binding template's {name} {text!r} lacks {', '.join(missing)}"
                )
        if "{attribute}" in self.question:
            raise InvalidSelectionError(
                "the binding template's question must not contain {attribute}: it would "
                "give the answer away"
            )

    def prompt(self, entities: Sequence[str], attributes: Sequence[str], query: int
               ) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
        """The prompt text and the character spans of each entity and attribute in it."""
        text = self.preamble + (self.joiner if self.preamble else "")
        e_spans, a_spans = [], []
        for i, (entity, attribute) in enumerate(zip(entities, attributes)):
            if i:
                text += self.joiner
            statement = self.statement.format(entity=entity, attribute=attribute)
            e_at = self.statement.index("{entity}")
            a_at = self.statement.index("{attribute}")
            # offsets of the slots once the other slot is filled in
            e_start = len(text) + e_at + (len(attribute) - len("{attribute}") if a_at < e_at else 0)
            a_start = len(text) + a_at + (len(entity) - len("{entity}") if e_at < a_at else 0)
            e_spans.append((e_start, e_start + len(entity)))
            a_spans.append((a_start, a_start + len(attribute)))
            text += statement
        return text + self.question.format(entity=entities[query]), e_spans, a_spans

    def question_spans(self, entity: str, offset: int) -> list[tuple[int, int]]:
        """Character spans of ``entity`` in the question, when the question starts at ``offset``."""
        spans, filled, at = [], 0, 0
        while (found := self.question.find("{entity}", at)) >= 0:
            start = offset + found + filled
            spans.append((start, start + len(entity)))
            filled += len(entity) - len("{entity}")
            at = found + len("{entity}")
        return spans


BINDING_TEMPLATES: dict[str, BindingTemplate] = {
    "color": BindingTemplate(),
    "city": BindingTemplate(
        statement="{entity} lives in {attribute}.",
        question="\nQuestion: Where does {entity} live?\nAnswer: {entity} lives in",
        attribute_pool=CITIES,
    ),
    "animal": BindingTemplate(
        statement="{entity} feeds the {attribute}.",
        question="\nQuestion: Which animal does {entity} feed?\nAnswer: {entity} feeds the",
        attribute_pool=ANIMALS,
    ),
    "object": BindingTemplate(
        statement="{entity} has the {attribute}.",
        question="\nQuestion: What does {entity} have?\nAnswer: {entity} has the",
        attribute_pool=OBJECTS,
    ),
}


def binding_template(template: BindingTemplate | str | None) -> BindingTemplate:
    """The template ``template`` names (a key of :data:`BINDING_TEMPLATES`; itself if a
    :class:`BindingTemplate`; ``"color"`` when ``None``)."""
    if template is None:
        return BINDING_TEMPLATES["color"]
    if isinstance(template, BindingTemplate):
        return template
    if template in BINDING_TEMPLATES:
        return BINDING_TEMPLATES[template]
    raise InvalidSelectionError(
        f"unknown binding template {template!r}; use one of {', '.join(BINDING_TEMPLATES)} "
        "or a BindingTemplate"
    )
